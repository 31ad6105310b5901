"""Security administration: identities, API keys, roles, bindings, signing keys.

Every change is written to etcd (layout in `tamto_common.policy`), announced on
the bus as `tamto.events.auth.changed` so gateways reload their policy, and
audited with the actor and source the gateway forwarded. Nothing here ever
logs, stores or audits an API key's secret.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import aetcd
import structlog
from nats.aio.client import Client as NatsClient

from tamto_auth import signing
from tamto_auth.identities import ApiKeyStore, KeyRecord
from tamto_auth.signing import SigningKeys
from tamto_common.apikeys import ApiKey
from tamto_common.audit import ADMIN, AuditLog
from tamto_common.bus import publish_event
from tamto_common.errors import AlreadyExists, FailedPrecondition, NotFound
from tamto_common.policy import (
    AUTH_CHANGED,
    BINDINGS_PREFIX,
    IDENTITIES_PREFIX,
    ROLES_PREFIX,
    Grant,
    IdentityKind,
    IdentityRecord,
    Role,
    binding_key,
    binding_value,
    check_identity_name,
    check_subject,
    identity_key,
    parse_binding,
    role_key,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asked for an admin action, and from where (as the gateway saw the client)."""

    actor: str
    source: str


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """An API key without its secret."""

    key_id: str
    identity: str
    disabled: bool
    created_at: float


@dataclass(frozen=True, slots=True)
class IdentityInfo:
    """An identity with its keys and the roles bound to it."""

    record: IdentityRecord
    keys: tuple[KeyInfo, ...]
    roles: tuple[str, ...]


def _key_info(key_id: str, record: KeyRecord) -> KeyInfo:
    return KeyInfo(key_id, record.subject, record.disabled, record.created_at)


class SecurityAdmin:
    """The auth service's admin operations (the gRPC adapter calls these)."""

    def __init__(
        self,
        etcd: aetcd.Client,
        keys: ApiKeyStore,
        bus: NatsClient | None,
        audit: AuditLog,
        signing_dir: Path,
        signing_retain_s: float,
        on_signing_keys: Callable[[SigningKeys], None],
    ) -> None:
        self._etcd = etcd
        self._keys = keys
        self._bus = bus
        self._audit = audit
        self._signing_dir = signing_dir
        self._signing_retain_s = signing_retain_s
        self._on_signing_keys = on_signing_keys
        self._signing_lock = asyncio.Lock()

    async def _changed(self, kind: str, name: str) -> None:
        if self._bus is None:
            return
        try:
            await publish_event(self._bus, AUTH_CHANGED, kind=kind, name=name)
            await self._bus.flush(timeout=1)
        except Exception as exc:  # etcd holds the change; gateways also reload periodically
            log.warning("auth change not announced", kind=kind, name=name, error=str(exc))

    async def _audit_ok(self, caller: Caller, action: str, target: str, detail: str = "") -> None:
        await self._audit.record(
            ADMIN,
            actor=caller.actor,
            action=action,
            target=target,
            outcome="ok",
            source=caller.source,
            detail=detail,
        )

    # identities

    async def _identity(self, name: str) -> IdentityRecord:
        got = await self._etcd.get(identity_key(check_identity_name(name)))
        if got is None:
            raise NotFound(f"identity {name!r} does not exist")
        return IdentityRecord.from_json(got.value)

    async def ensure_identity(self, name: str, kind: IdentityKind) -> IdentityRecord:
        """Create identity `name` unless it exists (used for the development identity)."""
        record = IdentityRecord(check_identity_name(name), kind, time.time())
        tx = self._etcd.transactions
        key = identity_key(name)
        await self._etcd.transaction(
            compare=[tx.version(key) == 0], success=[tx.put(key, record.to_json())], failure=[]
        )
        return await self._identity(name)

    async def create_identity(self, caller: Caller, name: str, kind: IdentityKind) -> IdentityInfo:
        """Create a user or service account; `AlreadyExists` if the name is taken."""
        record = IdentityRecord(check_identity_name(name), kind, time.time())
        tx = self._etcd.transactions
        key = identity_key(name)
        created, _ = await self._etcd.transaction(
            compare=[tx.version(key) == 0], success=[tx.put(key, record.to_json())], failure=[]
        )
        if not created:
            raise AlreadyExists(f"identity {name!r} already exists")
        await self._changed("identity", name)
        await self._audit_ok(caller, "identity.create", f"identity {name}", f"kind={kind.value}")
        return IdentityInfo(record, (), ())

    async def list_identities(self) -> list[IdentityInfo]:
        """Every identity with its keys and roles, sorted by name."""
        identities = [
            IdentityRecord.from_json(kv.value)
            for kv in await self._etcd.get_prefix(IDENTITIES_PREFIX.encode())
        ]
        keys: dict[str, list[KeyInfo]] = {}
        for key_id, record in await self._keys.list():
            keys.setdefault(record.subject, []).append(_key_info(key_id, record))
        roles = await self._roles_by_subject()
        return [
            IdentityInfo(i, tuple(keys.get(i.name, ())), tuple(sorted(roles.get(i.name, ()))))
            for i in sorted(identities, key=lambda i: i.name)
        ]

    async def set_identity_disabled(
        self, caller: Caller, name: str, disabled: bool
    ) -> IdentityInfo:
        """Disable (or enable) an identity: its keys and tokens stop working."""
        record = replace(await self._identity(name), disabled=disabled)
        await self._etcd.put(identity_key(name), record.to_json())
        await self._changed("identity", name)
        await self._audit_ok(
            caller, "identity.disable" if disabled else "identity.enable", f"identity {name}"
        )
        return next(i for i in await self.list_identities() if i.record.name == name)

    async def is_disabled(self, name: str) -> bool:
        """Whether `name` is an identity that is disabled (unknown names are not)."""
        got = await self._etcd.get(identity_key(name))
        return got is not None and IdentityRecord.from_json(got.value).disabled

    # API keys

    async def create_api_key(self, caller: Caller, identity: str) -> tuple[ApiKey, KeyInfo]:
        """A new key for `identity` (which must exist): the key, shown once, and its info."""
        await self._identity(identity)
        api_key, record = await self._keys.create(identity)
        await self._changed("key", api_key.key_id)
        await self._audit_ok(caller, "key.create", f"key {api_key.key_id} of {identity}")
        return api_key, _key_info(api_key.key_id, record)

    async def set_api_key_disabled(self, caller: Caller, key_id: str, disabled: bool) -> KeyInfo:
        """Disable or enable one key; `NotFound` for an unknown key id."""
        record = await self._keys.set_disabled(key_id, disabled)
        await self._changed("key", key_id)
        await self._audit_ok(
            caller, "key.disable" if disabled else "key.enable", f"key {key_id} of {record.subject}"
        )
        return _key_info(key_id, record)

    async def rotate_api_key(self, caller: Caller, key_id: str) -> tuple[ApiKey, KeyInfo]:
        """A new key for the identity of `key_id`, which is disabled at once."""
        old = await self._keys.get(key_id)
        if old.disabled:
            raise FailedPrecondition(f"API key {key_id} is disabled: create a new key instead")
        api_key, record = await self._keys.create(old.subject)
        await self._keys.set_disabled(key_id, True)
        await self._changed("key", key_id)
        await self._audit_ok(
            caller, "key.rotate", f"key {key_id} of {old.subject}", f"new key {api_key.key_id}"
        )
        return api_key, _key_info(api_key.key_id, record)

    async def delete_api_key(self, caller: Caller, key_id: str) -> KeyInfo:
        """Remove one key for good: it stops authenticating, and gateways refuse the
        tokens minted from it as they do a disabled key's. `NotFound` for an unknown id."""
        record = await self._keys.delete(key_id)
        await self._changed("key", key_id)
        await self._audit_ok(caller, "key.delete", f"key {key_id} of {record.subject}")
        return _key_info(key_id, record)

    # roles and bindings

    async def put_role(self, caller: Caller, name: str, grants: tuple[Grant, ...]) -> Role:
        """Create or replace role `name` with `grants`."""
        role = Role(check_identity_name(name), grants)
        await self._etcd.put(role_key(name), role.to_json())
        await self._changed("role", name)
        await self._audit_ok(
            caller, "role.put", f"role {name}", " ".join(str(g) for g in grants) or "(no grants)"
        )
        return role

    async def ensure_role(self, name: str, grants: tuple[Grant, ...]) -> None:
        """Create role `name` unless it exists (used for the development identity's role)."""
        role = Role(check_identity_name(name), grants)
        tx = self._etcd.transactions
        key = role_key(name)
        await self._etcd.transaction(
            compare=[tx.version(key) == 0], success=[tx.put(key, role.to_json())], failure=[]
        )

    async def delete_role(self, caller: Caller, name: str) -> bool:
        """Delete role `name` and its bindings; False if there was no such role."""
        deleted = await self._etcd.delete(role_key(check_identity_name(name)))
        await self._etcd.delete_prefix(f"{BINDINGS_PREFIX}{name}/".encode())
        if not deleted:
            return False
        await self._changed("role", name)
        await self._audit_ok(caller, "role.delete", f"role {name}")
        return True

    async def list_roles(self) -> list[Role]:
        """Every role, sorted by name."""
        result = await self._etcd.get_prefix(ROLES_PREFIX.encode())
        return sorted((Role.from_json(kv.value) for kv in result), key=lambda r: r.name)

    async def bind(self, caller: Caller | None, subject: str, role: str) -> bool:
        """Bind `role` (which must exist) to `subject`; False if it was already bound."""
        check_subject(subject)
        if await self._etcd.get(role_key(check_identity_name(role))) is None:
            raise NotFound(f"role {role!r} does not exist")
        key = binding_key(role, subject)
        tx = self._etcd.transactions
        created, _ = await self._etcd.transaction(
            compare=[tx.version(key) == 0],
            success=[tx.put(key, binding_value(role, subject))],
            failure=[],
        )
        if created:
            await self._changed("binding", subject)
        if caller is not None:
            await self._audit_ok(
                caller, "role.bind", f"{subject} -> role {role}", "" if created else "unchanged"
            )
        return bool(created)

    async def unbind(self, caller: Caller, subject: str, role: str) -> bool:
        """Remove the binding of `role` to `subject`; False if there was none."""
        deleted = await self._etcd.delete(
            binding_key(check_identity_name(role), check_subject(subject))
        )
        if deleted:
            await self._changed("binding", subject)
        await self._audit_ok(
            caller, "role.unbind", f"{subject} -> role {role}", "" if deleted else "unchanged"
        )
        return bool(deleted)

    async def _roles_by_subject(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for kv in await self._etcd.get_prefix(BINDINGS_PREFIX.encode()):
            subject, role = parse_binding(kv.value)
            out.setdefault(subject, []).append(role)
        return out

    async def list_bindings(self) -> dict[str, list[str]]:
        """Subject -> sorted role names, for every subject with a binding."""
        return {s: sorted(r) for s, r in sorted((await self._roles_by_subject()).items())}

    # signing keys

    async def rotate_signing_key(self, caller: Caller | None) -> SigningKeys:
        """Make a new signing key current; announce it so gateways refetch the JWKS."""
        async with self._signing_lock:
            keys = await asyncio.to_thread(
                signing.rotate, self._signing_dir, self._signing_retain_s
            )
            self._on_signing_keys(keys)
        await self._changed("signing-key", keys.current.kid)
        await self._audit.record(
            ADMIN,
            actor=caller.actor if caller else "auth",
            action="signing-key.rotate",
            target=f"signing key {keys.current.kid}",
            outcome="ok",
            source=caller.source if caller else "schedule",
        )
        return keys

    async def rotate_signing_keys_every(self, max_age_s: float) -> None:
        """Rotate whenever the current key is older than `max_age_s` (runs until cancelled)."""
        while True:
            age = await asyncio.to_thread(signing.current_age_s, self._signing_dir)
            if age >= max_age_s:
                try:
                    await self.rotate_signing_key(None)
                except OSError as exc:  # keep signing with the current key; retry next round
                    log.error("signing key rotation failed", error=str(exc))
                age = 0.0
            await asyncio.sleep(max(1.0, min(max_age_s - age, 3600.0)))
