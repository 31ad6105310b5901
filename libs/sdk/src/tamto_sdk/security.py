"""Security administration: identities, API keys, roles, bindings, signing keys.

Reach it as `client.security`. Every call but `whoami` needs `admin` on `*`;
without it the gateway answers `PermissionDenied` naming the missing permission.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tamto_protocol.security import IdentityKind, Permission
from tamto_protocol.v1 import auth_pb2, gateway_pb2
from tamto_sdk._calls import Calls

__all__ = [
    "ApiKeyInfo",
    "Grant",
    "Identity",
    "IdentityKind",
    "NewApiKey",
    "Permission",
    "Role",
    "Security",
    "WhoAmI",
]


@dataclass(frozen=True, slots=True)
class Grant:
    """`permission` on every stream whose name matches `pattern` (`*`: any characters)."""

    permission: Permission
    pattern: str

    @classmethod
    def parse(cls, text: str) -> Grant:
        """`publish:orders.*` -> Grant(PUBLISH, "orders.*"); ValueError if malformed."""
        permission, sep, pattern = text.partition(":")
        if not sep or not pattern:
            raise ValueError(f"expected PERMISSION:PATTERN, got {text!r}")
        return cls(Permission(permission), pattern)

    def __str__(self) -> str:
        return f"{self.permission.value}:{self.pattern}"


@dataclass(frozen=True, slots=True)
class Role:
    """A named set of grants."""

    name: str
    grants: tuple[Grant, ...]


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    """An API key, without its secret."""

    key_id: str
    identity: str
    disabled: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class NewApiKey:
    """A key just created: `api_key` is shown this once and stored nowhere in clear."""

    info: ApiKeyInfo
    api_key: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Identity:
    """A user or service account, its keys and the roles bound to it."""

    name: str
    kind: IdentityKind
    disabled: bool
    created_at: datetime
    keys: tuple[ApiKeyInfo, ...]
    roles: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WhoAmI:
    """Who the client's token speaks for, and what it may do."""

    subject: str
    expires_at: datetime
    roles: tuple[str, ...]
    grants: tuple[Grant, ...]


def _time(unix: int) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def _grant(pb: Any) -> Grant:
    return Grant(Permission(pb.permission), pb.pattern)


def _key(pb: Any) -> ApiKeyInfo:
    return ApiKeyInfo(pb.key_id, pb.identity, bool(pb.disabled), _time(pb.created_at_unix))


def _identity(pb: Any) -> Identity:
    return Identity(
        name=pb.name,
        kind=IdentityKind(pb.kind),
        disabled=bool(pb.disabled),
        created_at=_time(pb.created_at_unix),
        keys=tuple(_key(k) for k in pb.keys),
        roles=tuple(pb.roles),
    )


def _role(pb: Any) -> Role:
    return Role(pb.name, tuple(_grant(g) for g in pb.grants))


class Security:
    """Admin operations on identities and policy; reach it as `client.security`."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def _call(self, method: str, request: Any) -> Any:
        return await self._calls.unary(getattr(self._calls.stub, method), request, retry=False)

    async def whoami(self) -> WhoAmI:
        """The caller's subject, token expiry, roles and grants."""
        pb = await self._calls.unary(self._calls.stub.WhoAmI, gateway_pb2.WhoAmIRequest())
        return WhoAmI(
            pb.subject,
            _time(pb.expires_at_unix),
            tuple(pb.roles),
            tuple(_grant(g) for g in pb.grants),
        )

    async def token(self) -> tuple[str, datetime]:
        """A valid bearer token for this client's API key, and when it expires."""
        metadata = await self._calls.auth.metadata()
        token = metadata[0][1].removeprefix("Bearer ")
        return token, _time(int(self._calls.auth.expires_at))

    async def create_identity(self, name: str, kind: IdentityKind = IdentityKind.USER) -> Identity:
        """Create a user or service account; `AlreadyExists` if the name is taken."""
        pb = await self._call(
            "CreateIdentity", auth_pb2.CreateIdentityRequest(name=name, kind=kind.value)
        )
        return _identity(pb)

    async def list_identities(self) -> list[Identity]:
        """Every identity with its keys and roles."""
        pb = await self._call("ListIdentities", auth_pb2.ListIdentitiesRequest())
        return [_identity(i) for i in pb.identities]

    async def set_identity_disabled(self, name: str, disabled: bool = True) -> Identity:
        """Disable (or enable) an identity: its keys and live tokens stop working within 1 s."""
        pb = await self._call(
            "SetIdentityDisabled",
            auth_pb2.SetIdentityDisabledRequest(name=name, disabled=disabled),
        )
        return _identity(pb)

    async def create_api_key(self, identity: str) -> NewApiKey:
        """A new API key for `identity`."""
        pb = await self._call("CreateApiKey", auth_pb2.CreateApiKeyRequest(identity=identity))
        return NewApiKey(_key(pb.info), pb.api_key)

    async def set_api_key_disabled(self, key_id: str, disabled: bool = True) -> ApiKeyInfo:
        """Disable (or enable) one API key by its id."""
        pb = await self._call(
            "SetApiKeyDisabled",
            auth_pb2.SetApiKeyDisabledRequest(key_id=key_id, disabled=disabled),
        )
        return _key(pb)

    async def rotate_api_key(self, key_id: str) -> NewApiKey:
        """A new key for the same identity; the old one is disabled at once."""
        pb = await self._call("RotateApiKey", auth_pb2.RotateApiKeyRequest(key_id=key_id))
        return NewApiKey(_key(pb.info), pb.api_key)

    async def delete_api_key(self, key_id: str) -> ApiKeyInfo:
        """Remove one API key for good (as it was before deletion is returned): it no
        longer authenticates and gateways refuse its tokens within 2 s."""
        pb = await self._call("DeleteApiKey", auth_pb2.DeleteApiKeyRequest(key_id=key_id))
        return _key(pb.info)

    async def put_role(self, name: str, grants: list[Grant] | tuple[Grant, ...]) -> Role:
        """Create or replace role `name`."""
        role = auth_pb2.Role(
            name=name,
            grants=[
                auth_pb2.Grant(permission=g.permission.value, pattern=g.pattern) for g in grants
            ],
        )
        return _role(await self._call("PutRole", auth_pb2.PutRoleRequest(role=role)))

    async def delete_role(self, name: str) -> bool:
        """Delete role `name` and its bindings; False if there was none."""
        pb = await self._call("DeleteRole", auth_pb2.DeleteRoleRequest(name=name))
        return bool(pb.deleted)

    async def list_roles(self) -> list[Role]:
        """Every role."""
        pb = await self._call("ListRoles", auth_pb2.ListRolesRequest())
        return [_role(r) for r in pb.roles]

    async def bind(self, subject: str, role: str) -> bool:
        """Bind `role` to `subject` (an identity, or `<issuer name>:<sub>`); False if it was."""
        pb = await self._call("BindRole", auth_pb2.BindRoleRequest(subject=subject, role=role))
        return bool(pb.changed)

    async def unbind(self, subject: str, role: str) -> bool:
        """Remove a binding; False if there was none."""
        pb = await self._call("UnbindRole", auth_pb2.BindRoleRequest(subject=subject, role=role))
        return bool(pb.changed)

    async def list_bindings(self) -> dict[str, tuple[str, ...]]:
        """Subject -> role names."""
        pb = await self._call("ListBindings", auth_pb2.ListBindingsRequest())
        return {b.subject: tuple(b.roles) for b in pb.bindings}

    async def rotate_signing_key(self) -> str:
        """Make a new token signing key current; returns its key id."""
        pb = await self._call("RotateSigningKey", auth_pb2.RotateSigningKeyRequest())
        return str(pb.current_kid)
