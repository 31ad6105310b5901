"""`tamto auth`: identities, API keys, roles, bindings and tokens."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Annotated

import typer

from tamto_cli.connect import Gateway, err, reaches_gateway
from tamto_cli.options import AsJson
from tamto_cli.output import report

if TYPE_CHECKING:
    import tamto_sdk

auth_app = typer.Typer(help="Identities, API keys, roles, bindings and tokens.")
user_app = typer.Typer(help="Users and service accounts, and their API keys.")
role_app = typer.Typer(help="Roles: permissions on stream-name patterns.")
auth_app.add_typer(user_app, name="user")
auth_app.add_typer(role_app, name="role")


def _key_dict(key: tamto_sdk.security.ApiKeyInfo) -> dict[str, object]:
    return {
        "key_id": key.key_id,
        "identity": key.identity,
        "disabled": key.disabled,
        "created_at": key.created_at.isoformat(),
    }


def _identity_dict(identity: tamto_sdk.security.Identity) -> dict[str, object]:
    return {
        "name": identity.name,
        "kind": identity.kind.value,
        "disabled": identity.disabled,
        "created_at": identity.created_at.isoformat(),
        "keys": [_key_dict(k) for k in identity.keys],
        "roles": list(identity.roles),
    }


def _print_new_key(new: tamto_sdk.security.NewApiKey, as_json: bool) -> None:
    if as_json:
        print(json.dumps({**_key_dict(new.info), "api_key": new.api_key}))
        return
    typer.echo(f"key {new.info.key_id} for {new.info.identity} (shown once, store it now):")
    typer.echo(new.api_key)


@user_app.command("create")
@reaches_gateway
def user_create(
    gateway: Gateway,
    name: str,
    service: Annotated[bool, typer.Option(help="a service account, not a person")] = False,
    key: Annotated[bool, typer.Option(help="also create a first API key")] = True,
    as_json: AsJson = False,
) -> None:
    """Create a user (or --service account) and, unless --no-key, its first API key."""
    import tamto_sdk

    kind = (
        tamto_sdk.security.IdentityKind.SERVICE if service else tamto_sdk.security.IdentityKind.USER
    )

    async def create(client: tamto_sdk.Client) -> tamto_sdk.security.NewApiKey | None:
        await client.security.create_identity(name, kind)
        return await client.security.create_api_key(name) if key else None

    new = gateway.fetch(create)
    if new is not None:
        _print_new_key(new, as_json)
    else:
        report(as_json, f"{name}: created ({kind.value})", {"name": name, "kind": kind.value})


@user_app.command("list")
@reaches_gateway
def user_list(gateway: Gateway, as_json: AsJson = False) -> None:
    """List identities: `NAME<TAB>KIND<TAB>enabled|disabled<TAB>ROLES<TAB>KEYS` (or JSON)."""
    identities = gateway.fetch(lambda client: client.security.list_identities())
    if as_json:
        print(json.dumps([_identity_dict(i) for i in identities]))
        return
    for i in identities:
        keys = ",".join(f"{k.key_id}{'(disabled)' if k.disabled else ''}" for k in i.keys)
        state = "disabled" if i.disabled else "enabled"
        typer.echo(f"{i.name}\t{i.kind.value}\t{state}\t{','.join(i.roles)}\t{keys}")


def _set_identity(gateway: Gateway, name: str, disabled: bool, as_json: bool) -> None:
    gateway.fetch(lambda client: client.security.set_identity_disabled(name, disabled))
    state = "disabled" if disabled else "enabled"
    report(as_json, f"{name}: {state}", {"name": name, "disabled": disabled})


@user_app.command("disable")
@reaches_gateway
def user_disable(gateway: Gateway, name: str, as_json: AsJson = False) -> None:
    """Disable an identity: its keys and its live tokens stop working."""
    _set_identity(gateway, name, True, as_json)


@user_app.command("enable")
@reaches_gateway
def user_enable(gateway: Gateway, name: str, as_json: AsJson = False) -> None:
    """Enable a disabled identity again."""
    _set_identity(gateway, name, False, as_json)


@user_app.command("add-key")
@reaches_gateway
def user_add_key(gateway: Gateway, name: str, as_json: AsJson = False) -> None:
    """Create another API key for an identity (printed once)."""

    _print_new_key(gateway.fetch(lambda client: client.security.create_api_key(name)), as_json)


@user_app.command("rotate-key")
@reaches_gateway
def user_rotate_key(gateway: Gateway, key_id: str, as_json: AsJson = False) -> None:
    """Replace an API key: prints the new key; the old one is disabled at once."""

    _print_new_key(
        gateway.fetch(lambda client: client.security.rotate_api_key(key_id)),
        as_json,
    )


@user_app.command("disable-key")
@reaches_gateway
def user_disable_key(
    gateway: Gateway,
    key_id: str,
    enable: Annotated[bool, typer.Option(help="enable it again instead")] = False,
    as_json: AsJson = False,
) -> None:
    """Disable (or --enable) one API key by its id."""

    gateway.fetch(lambda c: c.security.set_api_key_disabled(key_id, not enable))
    state = "enabled" if enable else "disabled"
    report(as_json, f"key {key_id}: {state}", {"key_id": key_id, "disabled": not enable})


@user_app.command("delete-key")
@reaches_gateway
def user_delete_key(gateway: Gateway, key_id: str, as_json: AsJson = False) -> None:
    """Delete one API key by its id: it stops authenticating and its tokens are refused."""

    info = gateway.fetch(lambda client: client.security.delete_api_key(key_id))
    text = f"key {key_id} of {info.identity}: deleted"
    report(as_json, text, {"key_id": key_id, "identity": info.identity, "deleted": True})


@role_app.command("put")
@reaches_gateway
def role_put(
    gateway: Gateway,
    name: str,
    grant: Annotated[
        list[str] | None,
        typer.Option("--grant", "-g", help="PERMISSION:PATTERN, e.g. publish:orders.* (repeat)"),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Create or replace a role with its grants (publish, consume, admin on a pattern)."""
    import tamto_sdk

    try:
        grants = [tamto_sdk.security.Grant.parse(g) for g in grant or []]
    except ValueError as exc:
        err.print(f"tamto auth role put: --grant: {exc} (permissions: publish, consume, admin)")
        raise typer.Exit(2) from None

    role = gateway.fetch(lambda client: client.security.put_role(name, grants))
    grants_text = [str(g) for g in role.grants]
    text = f"{role.name}: {' '.join(grants_text) or '(no grants)'}"
    report(as_json, text, {"name": role.name, "grants": grants_text})


@role_app.command("list")
@reaches_gateway
def role_list(gateway: Gateway, as_json: AsJson = False) -> None:
    """List roles: `NAME<TAB>GRANTS` (or JSON)."""

    roles = gateway.fetch(lambda client: client.security.list_roles())
    if as_json:
        print(json.dumps([{"name": r.name, "grants": [str(g) for g in r.grants]} for r in roles]))
        return
    for r in roles:
        typer.echo(f"{r.name}\t{' '.join(str(g) for g in r.grants)}")


@role_app.command("delete")
@reaches_gateway
def role_delete(gateway: Gateway, name: str, as_json: AsJson = False) -> None:
    """Delete a role and its bindings; exits 4 (NOT_FOUND) if there was no such role."""

    gateway.delete("role", name, lambda client: client.security.delete_role(name), as_json)


@auth_app.command("bind")
@reaches_gateway
def bind(
    gateway: Gateway,
    subject: str,
    role: str,
    remove: Annotated[bool, typer.Option(help="remove the binding instead")] = False,
    as_json: AsJson = False,
) -> None:
    """Bind ROLE to SUBJECT (an identity, or ISSUER-NAME:SUB for OIDC); --remove unbinds."""

    def change(client: tamto_sdk.Client) -> Awaitable[bool]:
        verb = client.security.unbind if remove else client.security.bind
        return verb(subject, role)

    changed = gateway.fetch(change)
    verb = "unbound from" if remove else "bound to"
    text = f"{role} {verb} {subject}" + ("" if changed else " (no change)")
    report(
        as_json, text, {"subject": subject, "role": role, "bound": not remove, "changed": changed}
    )


@auth_app.command("bindings")
@reaches_gateway
def bindings(gateway: Gateway, as_json: AsJson = False) -> None:
    """List bindings: `SUBJECT<TAB>ROLES` (or JSON)."""

    found = gateway.fetch(lambda client: client.security.list_bindings())
    if as_json:
        print(json.dumps({s: list(r) for s, r in found.items()}))
        return
    for subject, roles in found.items():
        typer.echo(f"{subject}\t{','.join(roles)}")


@auth_app.command("token")
@reaches_gateway
def token(gateway: Gateway, as_json: AsJson = False) -> None:
    """Print a bearer token for the API key (for grpcurl and other raw clients)."""

    value, expires = gateway.fetch(lambda client: client.security.token())
    if as_json:
        print(json.dumps({"token": value, "expires_at": expires.isoformat()}))
    else:
        typer.echo(value)


@auth_app.command("whoami")
@reaches_gateway
def whoami(gateway: Gateway, as_json: AsJson = False) -> None:
    """Show who the API key authenticates as, its roles and grants."""

    me = gateway.fetch(lambda client: client.security.whoami())
    grants = [str(g) for g in me.grants]
    if as_json:
        print(
            json.dumps(
                {
                    "subject": me.subject,
                    "expires_at": me.expires_at.isoformat(),
                    "roles": list(me.roles),
                    "grants": grants,
                }
            )
        )
        return
    typer.echo(f"{me.subject}\troles: {','.join(me.roles)}\tgrants: {' '.join(grants)}")


@auth_app.command("rotate-signing-key")
@reaches_gateway
def rotate_signing_key(gateway: Gateway, as_json: AsJson = False) -> None:
    """Make a new token signing key current (older ones verify until their tokens expire)."""

    key_id = gateway.fetch(lambda client: client.security.rotate_signing_key())
    report(as_json, f"signing key {key_id} is current", {"key_id": key_id})
