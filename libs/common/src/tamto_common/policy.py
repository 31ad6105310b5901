"""Who may do what: identities, roles, bindings and the decisions made from them.

The auth service writes the policy to etcd; every gateway reads all of it into a
`Policy` snapshot and decides locally. Layout (JSON values):

    /tamto/auth/identities/<name>          {"name", "kind", "disabled", "created_at"}
    /tamto/auth/roles/<name>               {"name", "grants": [{"permission", "pattern"}]}
    /tamto/auth/bindings/<role>/<subject>  {"subject", "role", "created_at"}

`<subject>` is percent-encoded in the key (an OIDC subject may hold `/`). API
keys live under `/tamto/auth/keys/<key_id>` (see the auth service); the
snapshot keeps of each only whether it is disabled, because a token minted from
a key names it (claim `key_id`) and stops working when its key is disabled,
deleted or rotated. After every change the auth service publishes
`tamto.events.auth.changed`, and gateways reload the snapshot.

Permissions are `publish`, `consume` and `admin`, each granted on a stream-name
pattern in which `*` matches any run of characters (`orders.*`, `*`). `admin`
on a pattern implies `publish` and `consume` on it. Managing identities, roles
and bindings needs `admin` on `*` exactly.
"""

from __future__ import annotations

import functools
import json
import re
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tamto_common.errors import DataLoss, InvalidArgument, PermissionDenied
from tamto_protocol.security import IdentityKind as IdentityKind
from tamto_protocol.security import Permission as Permission

AUTH_PREFIX = "/tamto/auth/"
IDENTITIES_PREFIX = AUTH_PREFIX + "identities/"
ROLES_PREFIX = AUTH_PREFIX + "roles/"
BINDINGS_PREFIX = AUTH_PREFIX + "bindings/"
KEYS_PREFIX = AUTH_PREFIX + "keys/"
#: The token claim naming the API key a token was minted from.
KEY_ID_CLAIM = "key_id"
#: Bus topic (under `tamto.events.`) announcing any change to identities, keys or policy.
AUTH_CHANGED = "auth.changed"
#: The pattern that grants over every stream; `admin` on it manages security.
ALL_STREAMS = "*"

_IDENTITY = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_PATTERN = re.compile(r"[A-Za-z0-9._*-]{1,128}")
_MAX_SUBJECT = 256


def check_identity_name(name: str) -> str:
    """`name` if it is a legal identity name (also used for roles), else `InvalidArgument`."""
    if not _IDENTITY.fullmatch(name):
        raise InvalidArgument(
            f"illegal name {name[:100]!r}: use 1-64 lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_subject(subject: str) -> str:
    """A subject a role can be bound to: an identity name or `<issuer name>:<sub>`."""
    if not subject or len(subject) > _MAX_SUBJECT or not subject.isprintable():
        raise InvalidArgument(
            f"illegal subject {subject[:100]!r}: 1-{_MAX_SUBJECT} printable characters"
        )
    return subject


def check_pattern(pattern: str) -> str:
    """`pattern` if it is a legal stream-name pattern, else `InvalidArgument`."""
    if not _PATTERN.fullmatch(pattern):
        raise InvalidArgument(
            f"illegal stream pattern {pattern[:100]!r}: use stream-name characters "
            "(letters, digits, '.', '_', '-') and '*'"
        )
    return pattern


def parse_permission(text: str) -> Permission:
    """The permission named `text`; `InvalidArgument` naming the choices otherwise."""
    try:
        return Permission(text)
    except ValueError:
        raise InvalidArgument(
            f"unknown permission {text[:50]!r}: use publish, consume or admin"
        ) from None


@functools.lru_cache(maxsize=4096)
def _pattern_parts(pattern: str) -> tuple[str, ...]:
    """A stream-name pattern's literal parts, between its `*`s."""
    return tuple(pattern.split("*"))


def pattern_matches(pattern: str, stream: str) -> bool:
    """Whether `stream` matches the stream-name pattern (`*`: any run of characters).

    Each literal part is found at its leftmost place after the previous one, which
    is right for patterns whose only wildcard is `*`: O(len(pattern) * len(stream))
    at worst. (A regular expression of `.*`s backtracks: `a*a*...a*b`, 20 stars,
    against a name of 60 `a`s ran for over a minute, on every authorization.)
    """
    parts = _pattern_parts(pattern)
    if len(parts) == 1:
        return stream == pattern
    first, *middle, last = parts
    if len(stream) < len(first) + len(last) or not stream.startswith(first):
        return False
    if not stream.endswith(last):
        return False
    at, end = len(first), len(stream) - len(last)
    for part in middle:
        found = stream.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


@dataclass(frozen=True, slots=True)
class Grant:
    """One permission on the streams matching `pattern`."""

    permission: Permission
    pattern: str

    def __post_init__(self) -> None:
        check_pattern(self.pattern)

    def covers(self, permission: Permission, stream: str) -> bool:
        """Whether this grant allows `permission` on `stream` (admin implies the others)."""
        if self.permission is not permission and self.permission is not Permission.ADMIN:
            return False
        return pattern_matches(self.pattern, stream)

    def __str__(self) -> str:
        return f"{self.permission.value}:{self.pattern}"


@dataclass(frozen=True, slots=True)
class Role:
    """A named set of grants."""

    name: str
    grants: tuple[Grant, ...]

    def to_json(self) -> bytes:
        grants = [{"permission": g.permission.value, "pattern": g.pattern} for g in self.grants]
        return json.dumps({"name": self.name, "grants": grants}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Role:
        try:
            raw: dict[str, Any] = json.loads(data)
            grants = tuple(
                Grant(Permission(g["permission"]), str(g["pattern"])) for g in raw["grants"]
            )
            return cls(name=str(raw["name"]), grants=grants)
        except (ValueError, TypeError, KeyError, InvalidArgument) as exc:
            raise DataLoss(f"unreadable role record: {exc}") from None


@dataclass(frozen=True, slots=True)
class IdentityRecord:
    """A user or service account (its API keys are stored separately)."""

    name: str
    kind: IdentityKind
    created_at: float
    disabled: bool = False

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "name": self.name,
                "kind": self.kind.value,
                "created_at": self.created_at,
                "disabled": self.disabled,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> IdentityRecord:
        try:
            raw: dict[str, Any] = json.loads(data)
            return cls(
                name=str(raw["name"]),
                kind=IdentityKind(raw["kind"]),
                created_at=float(raw["created_at"]),
                disabled=bool(raw["disabled"]),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise DataLoss(f"unreadable identity record: {exc}") from None


def identity_key(name: str) -> bytes:
    """The etcd key of identity `name`."""
    return f"{IDENTITIES_PREFIX}{name}".encode()


def role_key(name: str) -> bytes:
    """The etcd key of role `name`."""
    return f"{ROLES_PREFIX}{name}".encode()


def binding_key(role: str, subject: str) -> bytes:
    """The etcd key binding `role` to `subject`."""
    return f"{BINDINGS_PREFIX}{role}/{urllib.parse.quote(subject, safe='')}".encode()


def binding_value(role: str, subject: str) -> bytes:
    """The etcd value of a binding."""
    return json.dumps(
        {"subject": subject, "role": role, "created_at": time.time()}, sort_keys=True
    ).encode()


def parse_binding(data: bytes) -> tuple[str, str]:
    """(subject, role) of a stored binding."""
    try:
        raw: dict[str, Any] = json.loads(data)
        return str(raw["subject"]), str(raw["role"])
    except (ValueError, TypeError, KeyError) as exc:
        raise DataLoss(f"unreadable binding record: {exc}") from None


@dataclass(frozen=True)
class Policy:
    """A consistent snapshot of identities, roles and bindings, and the decisions from it."""

    identities: Mapping[str, IdentityRecord] = field(default_factory=dict)
    roles: Mapping[str, Role] = field(default_factory=dict)
    #: subject -> names of the roles bound to it (a role that no longer exists grants nothing)
    bindings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: API key id -> whether it is disabled; a key not here was deleted (or is newer)
    api_keys: Mapping[str, bool] = field(default_factory=dict)
    #: Wall-clock time (unix seconds) when the read that made this snapshot began
    loaded_at: float = 0.0

    @classmethod
    def build(
        cls,
        identities: Iterable[IdentityRecord],
        roles: Iterable[Role],
        bindings: Iterable[tuple[str, str]],
        api_keys: Mapping[str, bool] | None = None,
        loaded_at: float = 0.0,
    ) -> Policy:
        """A snapshot from records as stored; `bindings` are (subject, role) pairs,
        `api_keys` maps key ids to whether they are disabled."""
        bound: dict[str, list[str]] = {}
        for subject, role in bindings:
            bound.setdefault(subject, []).append(role)
        return cls(
            identities={i.name: i for i in identities},
            roles={r.name: r for r in roles},
            bindings={s: tuple(sorted(r)) for s, r in bound.items()},
            api_keys=dict(api_keys or {}),
            loaded_at=loaded_at,
        )

    def disabled(self, subject: str) -> bool:
        """Whether `subject` is an identity that an administrator disabled."""
        record = self.identities.get(subject)
        return record is not None and record.disabled

    def key_usable(self, key_id: str) -> bool | None:
        """Whether API key `key_id` may still back tokens: False when disabled, None
        when this snapshot does not know it (deleted, or created after the snapshot)."""
        disabled = self.api_keys.get(key_id)
        return None if disabled is None else not disabled

    def roles_of(self, subject: str) -> tuple[str, ...]:
        """The names of the roles bound to `subject`."""
        return self.bindings.get(subject, ())

    def grants_of(self, subject: str) -> tuple[Grant, ...]:
        """Every grant `subject` holds through its roles."""
        return tuple(
            grant
            for name in self.roles_of(subject)
            if (role := self.roles.get(name)) is not None
            for grant in role.grants
        )

    def allows(self, subject: str, permission: Permission, stream: str) -> bool:
        """Whether `subject` may do `permission` on `stream`."""
        if self.disabled(subject):
            return False
        return any(g.covers(permission, stream) for g in self.grants_of(subject))

    def allows_any(self, subject: str, stream: str) -> bool:
        """Whether `subject` holds any permission on `stream` (what describing it needs)."""
        return any(self.allows(subject, p, stream) for p in Permission)

    def is_security_admin(self, subject: str) -> bool:
        """Whether `subject` holds `admin` on `*`, which manages identities and policy."""
        if self.disabled(subject):
            return False
        return any(
            g.permission is Permission.ADMIN and g.pattern == ALL_STREAMS
            for g in self.grants_of(subject)
        )


def key_disabled(data: bytes) -> bool:
    """Whether a stored API key record (auth's JSON) is disabled; unreadable ones are."""
    try:
        record = json.loads(data)
    except ValueError:
        return True
    return not isinstance(record, dict) or record.get("disabled") is not False


def denied(subject: str, permission: Permission | str, what: str) -> PermissionDenied:
    """The error for a refused request, naming the missing permission."""
    return PermissionDenied(f"{subject!r} lacks permission {permission} on {what}")
