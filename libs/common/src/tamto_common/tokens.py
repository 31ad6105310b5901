"""Local verification of auth-issued tokens: no service calls auth per request.

Shared by the gateway and routers serving the direct path (docs/cluster.md
section 5): both verify a token with this code.

`TokenVerifier` keeps the auth service's public keys (its JWKS) in memory and
checks signatures and claims itself. A token naming an unknown `kid` triggers a
refetch, which is how a key rotation reaches the gateway; refetches are limited
to one per `refetch_interval_s`, so a flood of tokens with made-up kids costs
auth at most one call per interval. After a fetch that failed (auth down or
restarting) the next may come `RETRY_FAILED_FETCH_S` later: a gateway that
(re)started while auth was down verifies tokens within a fraction of a second
of auth serving again, not up to 5 s later.

Only EdDSA over Ed25519 is accepted. The algorithm is decided by the verifier
and the key, never by the token's header, which shuts out `alg: none` and the
HS256-keyed-with-the-public-key confusion.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import jwt
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tamto_common.errors import TamtoError, Unauthenticated, Unavailable
from tamto_common.policy import KEY_ID_CLAIM
from tamto_protocol.reconnect import MAX_RECONNECT_BACKOFF_MS

ALGORITHM = "EdDSA"
REQUIRED_CLAIMS = ("iss", "aud", "sub", "iat", "exp")

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a verified token speaks for, and until when (unix seconds).

    `key_id`: the API key the token was minted from (auth's tokens only), which the
    policy check refuses once that key is disabled, deleted or rotated; `issued_at`
    its `iat` (unix seconds).
    """

    subject: str
    expires_at: float
    key_id: str | None = None
    issued_at: float = 0.0


def parse_jwks(text: str) -> dict[str, Ed25519PublicKey]:
    """The Ed25519 signing keys of a JWKS document by kid; other kinds of key are skipped."""
    try:
        document = json.loads(text)
        entries = document["keys"]
        if not isinstance(entries, list):
            raise TypeError("keys is not a list")
    except (ValueError, TypeError, KeyError) as exc:
        raise Unavailable(f"malformed JWKS from auth: {exc}") from None
    keys: dict[str, Ed25519PublicKey] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not _is_ed25519_signing_key(entry):
            continue
        try:
            raw = base64.urlsafe_b64decode(entry["x"] + "=" * (-len(entry["x"]) % 4))
            keys[entry["kid"]] = Ed25519PublicKey.from_public_bytes(raw)
        except (ValueError, binascii.Error):
            log.warning("skipping unreadable JWK", kid=entry["kid"])
    return keys


def _is_ed25519_signing_key(entry: dict[str, Any]) -> bool:
    return (
        entry.get("kty") == "OKP"
        and entry.get("crv") == "Ed25519"
        and entry.get("alg", ALGORITHM) == ALGORITHM
        and entry.get("use", "sig") == "sig"
        and isinstance(entry.get("kid"), str)
        and isinstance(entry.get("x"), str)
    )


#: How soon a failed JWKS fetch may be tried again: the channels' reconnect policy.
RETRY_FAILED_FETCH_S = MAX_RECONNECT_BACKOFF_MS / 1000


class TokenVerifier:
    """Verifies tokens against a cached JWKS fetched with `fetch_jwks`."""

    def __init__(
        self,
        fetch_jwks: Callable[[], Awaitable[str]],
        issuer: str,
        audience: str,
        leeway_s: float = 5,
        refetch_interval_s: float = 5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch_jwks = fetch_jwks
        self._issuer = issuer
        self._audience = audience
        self._leeway_s = leeway_s
        self._refetch_interval_s = refetch_interval_s
        self._clock = clock
        self._keys: dict[str, Ed25519PublicKey] = {}
        self._fetched = False
        self._last_fetch: float | None = None
        self._last_fetch_failed = False
        self._lock = asyncio.Lock()
        self._keys_changed: list[Callable[[], None]] = []

    @property
    def issuer(self) -> str:
        """The `iss` this verifier accepts."""
        return self._issuer

    def on_keys_changed(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever a refetch changes the set of signing keys."""
        self._keys_changed.append(listener)

    async def verify(self, token: str) -> Principal:
        """The principal of a valid token; `Unauthenticated` saying why otherwise."""
        _, kid = token_header(token, (ALGORITHM,))
        key = await self._key(kid)
        claims = self._decode(token, key)
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise Unauthenticated("token subject invalid")
        key_id = claims.get(KEY_ID_CLAIM)
        if key_id is not None and (not isinstance(key_id, str) or not key_id):
            raise Unauthenticated("token key id invalid")
        return Principal(
            subject=subject,
            expires_at=float(claims["exp"]),
            key_id=key_id,
            issued_at=float(claims["iat"]),
        )

    def _decode(self, token: str, key: Ed25519PublicKey) -> dict[str, Any]:
        with decode_errors():
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                issuer=self._issuer,
                audience=self._audience,
                leeway=self._leeway_s,
                options={"require": list(REQUIRED_CLAIMS)},
            )
        return claims

    async def refresh(self) -> None:
        """Refetch the JWKS now (auth announced a new signing key)."""
        async with self._lock:
            await self._refetch()

    async def _key(self, kid: str) -> Ed25519PublicKey:
        key = self._keys.get(kid)
        if key is not None:
            return key
        async with self._lock:
            # Another caller may have refetched while this one waited.
            key = self._keys.get(kid)
            if key is None and self._may_refetch():
                await self._refetch()
                key = self._keys.get(kid)
        if key is None:
            if not self._fetched:
                raise Unavailable("token signing keys not available yet")
            raise Unauthenticated("token signed by unknown key")
        return key

    def _may_refetch(self) -> bool:
        interval = RETRY_FAILED_FETCH_S if self._last_fetch_failed else self._refetch_interval_s
        return self._last_fetch is None or self._clock() - self._last_fetch >= interval

    async def _refetch(self) -> None:
        # Recorded before the call: a failing auth service is not retried faster either.
        self._last_fetch = self._clock()
        self._last_fetch_failed = True
        try:
            text = await self._fetch_jwks()
        except TamtoError:
            raise
        except Exception as exc:
            raise Unavailable(f"cannot fetch token signing keys: {exc}") from None
        # Replaced, not merged: a key auth withdrew stops verifying here too.
        keys = parse_jwks(text)
        self._last_fetch_failed = False
        # Before the first fetch nothing was verified with these keys: not a change.
        changed = self._fetched and _raw_keys(keys) != _raw_keys(self._keys)
        self._keys = keys
        self._fetched = True
        log.info("token signing keys refreshed", kids=sorted(self._keys), changed=changed)
        if changed:
            for listener in self._keys_changed:
                listener()


def _raw_keys(keys: Mapping[str, Ed25519PublicKey]) -> dict[str, bytes]:
    return {kid: key.public_bytes_raw() for kid, key in keys.items()}


@contextlib.contextmanager
def decode_errors() -> Iterator[None]:
    """Turn PyJWT's verdicts into `Unauthenticated` saying why."""
    try:
        yield
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("token expired") from None
    except jwt.ImmatureSignatureError:
        raise Unauthenticated("token not yet valid") from None
    except jwt.InvalidIssuerError:
        raise Unauthenticated("token issuer mismatch") from None
    except jwt.InvalidAudienceError:
        raise Unauthenticated("token audience mismatch") from None
    except jwt.InvalidSignatureError:
        raise Unauthenticated("token signature invalid") from None
    except jwt.MissingRequiredClaimError as exc:
        raise Unauthenticated(f"token missing claim {exc.claim}") from None
    except jwt.DecodeError:
        raise Unauthenticated("malformed token") from None
    except jwt.InvalidTokenError as exc:
        raise Unauthenticated(f"invalid token: {exc}") from None


class Verifier(Protocol):
    """Anything that turns a token into a principal."""

    async def verify(self, token: str) -> Principal: ...


def token_header(token: str, algorithms: Collection[str]) -> tuple[str, str]:
    """A token's (algorithm, key id), checked before any key is looked up:
    `Unauthenticated` saying what is wrong with it otherwise."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.DecodeError:
        raise Unauthenticated("malformed token") from None
    algorithm = header.get("alg")
    if algorithm not in algorithms:
        raise Unauthenticated("token algorithm not allowed")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise Unauthenticated("token has no key id")
    return str(algorithm), kid


class IssuerVerifier(Verifier, Protocol):
    """A verifier of one issuer's tokens, whose signing keys can change."""

    def on_keys_changed(self, listener: Callable[[], None]) -> None: ...


class VerifiedTokens:
    """Tokens already verified, each with its principal, until the token expires.

    Verifying a signature costs far more than the RPC it guards, and a client
    sends the same token on every call until it renews it, so the gateway
    verifies each token once. An entry is used only while its token has not
    expired (`exp`, without the verifier's leeway) and is dropped as soon as the
    verifiers' key sets change (a key rotated in or withdrawn). The policy check
    that a disabled identity is refused is not cached: `Guard` makes it on every
    call. At most `max_entries` tokens are kept; the oldest go first.
    """

    def __init__(self, max_entries: int = 10_000, wall_clock: Callable[[], float] = time.time):
        if max_entries <= 0:
            raise ValueError("max_entries must be positive")
        self._max_entries = max_entries
        self._wall_clock = wall_clock
        self._entries: dict[str, Principal] = {}
        #: Grows on every `clear`: a verification that began before it is not remembered.
        self.generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token: str) -> Principal | None:
        """The principal of `token` if it was verified and has not expired since."""
        principal = self._entries.get(token)
        if principal is None:
            return None
        if self._wall_clock() >= principal.expires_at:
            del self._entries[token]
            return None
        return principal

    def put(self, token: str, principal: Principal, generation: int) -> None:
        """Remember a token verified with the keys of `generation` (if still current)."""
        if generation != self.generation:
            return
        if len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[token] = principal

    def clear(self) -> None:
        """Forget every token (the keys they were verified with changed)."""
        self._entries.clear()
        self.generation += 1


class Authenticator:
    """Picks the verifier by the token's (unverified) `iss`: an external OIDC issuer
    configured by that name, or else the auth service's own verifier, which then
    checks the issuer and refuses a wrong one. Verified tokens are remembered
    (`VerifiedTokens`) until they expire or a verifier's keys change."""

    def __init__(
        self,
        internal: TokenVerifier,
        external: Mapping[str, IssuerVerifier],
        verified: VerifiedTokens | None = None,
    ) -> None:
        self.internal = internal
        self._external = dict(external)
        self.verified = verified if verified is not None else VerifiedTokens()
        internal.on_keys_changed(self.verified.clear)
        for verifier in self._external.values():
            verifier.on_keys_changed(self.verified.clear)

    async def verify(self, token: str) -> Principal:
        """The principal of a valid token; `Unauthenticated` saying why otherwise."""
        principal = self.verified.get(token)
        if principal is not None:
            return principal
        generation = self.verified.generation
        principal = await self._verify(token)
        self.verified.put(token, principal, generation)
        return principal

    async def _verify(self, token: str) -> Principal:
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError:
            raise Unauthenticated("malformed token") from None
        issuer = claims.get("iss")
        external = self._external.get(issuer) if isinstance(issuer, str) else None
        if external is not None:
            return await external.verify(token)
        if isinstance(issuer, str) and issuer != self.internal.issuer:
            raise Unauthenticated("token issuer not trusted")
        return await self.internal.verify(token)


Metadata = Iterable[tuple[str, str | bytes]]


def bearer_token(metadata: Metadata | None) -> str:
    """The token of the `authorization: Bearer <token>` entry of gRPC metadata."""
    values = [value for key, value in metadata or () if key.lower() == "authorization"]
    if not values:
        raise Unauthenticated("missing bearer token")
    if len(values) > 1:
        # Two credentials on one call: refuse rather than guess which one counts.
        raise Unauthenticated("more than one authorization header")
    value = values[0]
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    scheme, _, token = text.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise Unauthenticated("authorization is not a bearer token")
    token = token.strip()
    if not token:
        raise Unauthenticated("missing bearer token")
    return token


async def refetch_jwks(verifier: TokenVerifier, announced: asyncio.Event) -> None:
    """Refetch auth's JWKS whenever auth announces a new signing key (run as a task;
    `announced` is `PolicyCache.signing_key_events()`)."""
    while True:
        await announced.wait()
        announced.clear()
        try:
            await verifier.refresh()
        except Exception as exc:  # the next unknown kid triggers a refetch anyway
            log.warning("jwks refetch failed", error=str(exc))
