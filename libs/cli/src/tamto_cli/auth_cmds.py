"""`tamto auth`: identities, API keys, roles, bindings and tokens."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tamto_cli.connect import err, fetch, require_found
from tamto_cli.options import ApiKey, AsJson, DataDir, Url
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
def user_create(
    name: str,
    service: Annotated[bool, typer.Option(help="a service account, not a person")] = False,
    key: Annotated[bool, typer.Option(help="also create a first API key")] = True,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Create a user (or --service account) and, unless --no-key, its first API key."""
    import tamto_sdk

    kind = (
        tamto_sdk.security.IdentityKind.SERVICE if service else tamto_sdk.security.IdentityKind.USER
    )

    async def create(client: tamto_sdk.Client) -> tamto_sdk.security.NewApiKey | None:
        await client.security.create_identity(name, kind)
        return await client.security.create_api_key(name) if key else None

    new = fetch(url, api_key, data_dir, create)
    if new is not None:
        _print_new_key(new, as_json)
    else:
        report(as_json, f"{name}: created ({kind.value})", {"name": name, "kind": kind.value})


@user_app.command("list")
def user_list(
    as_json: AsJson = False, url: Url = None, api_key: ApiKey = None, data_dir: DataDir = None
) -> None:
    """List identities: `NAME<TAB>KIND<TAB>enabled|disabled<TAB>ROLES<TAB>KEYS` (or JSON)."""
    identities = fetch(url, api_key, data_dir, lambda client: client.security.list_identities())
    if as_json:
        print(json.dumps([_identity_dict(i) for i in identities]))
        return
    for i in identities:
        keys = ",".join(f"{k.key_id}{'(disabled)' if k.disabled else ''}" for k in i.keys)
        state = "disabled" if i.disabled else "enabled"
        typer.echo(f"{i.name}\t{i.kind.value}\t{state}\t{','.join(i.roles)}\t{keys}")


def _set_identity(
    name: str, disabled: bool, as_json: bool, url: str | None, key: str | None, d: Path | None
) -> None:
    fetch(url, key, d, lambda client: client.security.set_identity_disabled(name, disabled))
    state = "disabled" if disabled else "enabled"
    report(as_json, f"{name}: {state}", {"name": name, "disabled": disabled})


@user_app.command("disable")
def user_disable(
    name: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Disable an identity: its keys and its live tokens stop working."""
    _set_identity(name, True, as_json, url, api_key, data_dir)


@user_app.command("enable")
def user_enable(
    name: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Enable a disabled identity again."""
    _set_identity(name, False, as_json, url, api_key, data_dir)


@user_app.command("add-key")
def user_add_key(
    name: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Create another API key for an identity (printed once)."""

    _print_new_key(
        fetch(url, api_key, data_dir, lambda client: client.security.create_api_key(name)), as_json
    )


@user_app.command("rotate-key")
def user_rotate_key(
    key_id: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Replace an API key: prints the new key; the old one is disabled at once."""

    _print_new_key(
        fetch(url, api_key, data_dir, lambda client: client.security.rotate_api_key(key_id)),
        as_json,
    )


@user_app.command("disable-key")
def user_disable_key(
    key_id: str,
    enable: Annotated[bool, typer.Option(help="enable it again instead")] = False,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Disable (or --enable) one API key by its id."""

    fetch(url, api_key, data_dir, lambda c: c.security.set_api_key_disabled(key_id, not enable))
    state = "enabled" if enable else "disabled"
    report(as_json, f"key {key_id}: {state}", {"key_id": key_id, "disabled": not enable})


@user_app.command("delete-key")
def user_delete_key(
    key_id: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Delete one API key by its id: it stops authenticating and its tokens are refused."""

    info = fetch(url, api_key, data_dir, lambda client: client.security.delete_api_key(key_id))
    text = f"key {key_id} of {info.identity}: deleted"
    report(as_json, text, {"key_id": key_id, "identity": info.identity, "deleted": True})


@role_app.command("put")
def role_put(
    name: str,
    grant: Annotated[
        list[str] | None,
        typer.Option("--grant", "-g", help="PERMISSION:PATTERN, e.g. publish:orders.* (repeat)"),
    ] = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Create or replace a role with its grants (publish, consume, admin on a pattern)."""
    import tamto_sdk

    try:
        grants = [tamto_sdk.security.Grant.parse(g) for g in grant or []]
    except ValueError as exc:
        err.print(f"tamto auth role put: --grant: {exc} (permissions: publish, consume, admin)")
        raise typer.Exit(2) from None

    role = fetch(url, api_key, data_dir, lambda client: client.security.put_role(name, grants))
    grants_text = [str(g) for g in role.grants]
    text = f"{role.name}: {' '.join(grants_text) or '(no grants)'}"
    report(as_json, text, {"name": role.name, "grants": grants_text})


@role_app.command("list")
def role_list(
    as_json: AsJson = False, url: Url = None, api_key: ApiKey = None, data_dir: DataDir = None
) -> None:
    """List roles: `NAME<TAB>GRANTS` (or JSON)."""

    roles = fetch(url, api_key, data_dir, lambda client: client.security.list_roles())
    if as_json:
        print(json.dumps([{"name": r.name, "grants": [str(g) for g in r.grants]} for r in roles]))
        return
    for r in roles:
        typer.echo(f"{r.name}\t{' '.join(str(g) for g in r.grants)}")


@role_app.command("delete")
def role_delete(
    name: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Delete a role and its bindings; exits 4 (NOT_FOUND) if there was no such role."""

    require_found(
        fetch(url, api_key, data_dir, lambda client: client.security.delete_role(name)),
        f"role {name!r}",
    )
    report(as_json, f"{name}: deleted", {"name": name, "deleted": True})


@auth_app.command("bind")
def bind(
    subject: str,
    role: str,
    remove: Annotated[bool, typer.Option(help="remove the binding instead")] = False,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Bind ROLE to SUBJECT (an identity, or ISSUER-NAME:SUB for OIDC); --remove unbinds."""

    def change(client: tamto_sdk.Client) -> Awaitable[bool]:
        verb = client.security.unbind if remove else client.security.bind
        return verb(subject, role)

    changed = fetch(url, api_key, data_dir, change)
    verb = "unbound from" if remove else "bound to"
    text = f"{role} {verb} {subject}" + ("" if changed else " (no change)")
    report(
        as_json, text, {"subject": subject, "role": role, "bound": not remove, "changed": changed}
    )


@auth_app.command("bindings")
def bindings(
    as_json: AsJson = False, url: Url = None, api_key: ApiKey = None, data_dir: DataDir = None
) -> None:
    """List bindings: `SUBJECT<TAB>ROLES` (or JSON)."""

    found = fetch(url, api_key, data_dir, lambda client: client.security.list_bindings())
    if as_json:
        print(json.dumps({s: list(r) for s, r in found.items()}))
        return
    for subject, roles in found.items():
        typer.echo(f"{subject}\t{','.join(roles)}")


@auth_app.command("token")
def token(
    as_json: AsJson = False, url: Url = None, api_key: ApiKey = None, data_dir: DataDir = None
) -> None:
    """Print a bearer token for the API key (for grpcurl and other raw clients)."""

    value, expires = fetch(url, api_key, data_dir, lambda client: client.security.token())
    if as_json:
        print(json.dumps({"token": value, "expires_at": expires.isoformat()}))
    else:
        typer.echo(value)


@auth_app.command("whoami")
def whoami(
    as_json: AsJson = False, url: Url = None, api_key: ApiKey = None, data_dir: DataDir = None
) -> None:
    """Show who the API key authenticates as, its roles and grants."""

    me = fetch(url, api_key, data_dir, lambda client: client.security.whoami())
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
def rotate_signing_key(
    as_json: AsJson = False, url: Url = None, api_key: ApiKey = None, data_dir: DataDir = None
) -> None:
    """Make a new token signing key current (older ones verify until their tokens expire)."""

    key_id = fetch(url, api_key, data_dir, lambda client: client.security.rotate_signing_key())
    report(as_json, f"signing key {key_id} is current", {"key_id": key_id})
