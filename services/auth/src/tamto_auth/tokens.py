"""Token issue: a short-lived JWT signed with the current Ed25519 key.

A token minted from an API key names it (claim `key_id`), so gateways refuse the
token as soon as the key is disabled, deleted or rotated, not only when it expires.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import jwt

from tamto_auth.signing import SigningKeys
from tamto_common.policy import KEY_ID_CLAIM

ALGORITHM = "EdDSA"


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A signed token and what it says."""

    token: str
    subject: str
    expires_at: int


class TokenIssuer:
    """Signs tokens with claims `iss`, `aud`, `sub`, `iat`, `exp` (and `key_id` when minted
    from an API key) and header `kid`."""

    def __init__(
        self,
        keys: SigningKeys,
        issuer: str,
        audience: str,
        ttl_s: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keys = keys
        self._issuer = issuer
        self._audience = audience
        self._ttl_s = ttl_s
        self._clock = clock

    def use(self, keys: SigningKeys) -> None:
        """Sign with `keys.current` from now on (after a rotation)."""
        self._keys = keys

    def issue(self, subject: str, key_id: str | None = None) -> IssuedToken:
        """A token for `subject` (minted from API key `key_id`), valid from now for the
        configured lifetime."""
        now = int(self._clock())
        expires_at = now + self._ttl_s
        key = self._keys.current
        claims: dict[str, str | int] = {
            "iss": self._issuer,
            "aud": self._audience,
            "sub": subject,
            "iat": now,
            "exp": expires_at,
        }
        if key_id is not None:
            claims[KEY_ID_CLAIM] = key_id
        token = jwt.encode(claims, key.private_key, algorithm=ALGORITHM, headers={"kid": key.kid})
        return IssuedToken(token=token, subject=subject, expires_at=expires_at)
