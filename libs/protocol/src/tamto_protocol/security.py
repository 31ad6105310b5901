"""The security vocabulary servers and the SDK share: one `Permission`, one `IdentityKind`.

It lives in the protocol package, which both depend on, so `tamto_common.policy`
(servers) and `tamto_sdk.security` (clients) name the same enums, never drifting copies.
"""

from __future__ import annotations

import enum


class Permission(enum.StrEnum):
    """What a grant allows on the streams its pattern matches; `admin` implies `publish`
    and `consume` on the same pattern."""

    PUBLISH = "publish"
    CONSUME = "consume"
    ADMIN = "admin"


class IdentityKind(enum.StrEnum):
    """A person or a program."""

    USER = "user"
    SERVICE = "service"
