"""The gateway's token verifier: accepts auth's EdDSA tokens, refuses everything else."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tamto_common.errors import Unauthenticated, Unavailable
from tamto_common.tokens import (
    RETRY_FAILED_FETCH_S,
    Authenticator,
    Principal,
    TokenVerifier,
    VerifiedTokens,
    bearer_token,
    parse_jwks,
)

ISSUER = "tamto"
AUDIENCE = "tamto"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def jwk(key: Ed25519PrivateKey, kid: str) -> dict[str, str]:
    x = b64url(public_raw(key))
    return {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": "EdDSA", "use": "sig"}


def jwks(*entries: dict[str, str]) -> str:
    return json.dumps({"keys": list(entries)})


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": now,
        "exp": now + 600,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def sign(key: Ed25519PrivateKey, kid: str, **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), key, algorithm="EdDSA", headers={"kid": kid})


def unsigned(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    head = b64url(json.dumps(header).encode())
    body = b64url(json.dumps(payload).encode())
    return f"{head}.{body}.{b64url(signature)}"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class JwksSource:
    """A stand-in for auth's GetJwks that counts calls."""

    def __init__(self, document: str) -> None:
        self.document = document
        self.calls = 0
        self.fail: Exception | None = None

    async def __call__(self) -> str:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return self.document


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def source(key: Ed25519PrivateKey) -> JwksSource:
    return JwksSource(jwks(jwk(key, "k1")))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def verifier(source: JwksSource, clock: FakeClock) -> TokenVerifier:
    return TokenVerifier(source, ISSUER, AUDIENCE, leeway_s=5, refetch_interval_s=5, clock=clock)


async def refused(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(Unauthenticated) as info:
        await verifier.verify(token)
    return str(info.value)


async def test_valid_token_gives_its_principal(
    verifier: TokenVerifier, key: Ed25519PrivateKey
) -> None:
    exp = int(time.time()) + 300
    iat = exp - 300
    principal = await verifier.verify(sign(key, "k1", exp=exp, iat=iat))
    assert principal == Principal(subject="alice", expires_at=float(exp), issued_at=float(iat))


async def test_a_token_names_the_api_key_it_was_minted_from(
    verifier: TokenVerifier, key: Ed25519PrivateKey
) -> None:
    principal = await verifier.verify(sign(key, "k1", key_id="0123456789ab"))
    assert principal.key_id == "0123456789ab"
    for bad in (7, ""):
        with pytest.raises(Unauthenticated, match="token key id invalid"):
            await verifier.verify(sign(key, "k1", key_id=bad))


async def test_keys_are_cached(
    verifier: TokenVerifier, key: Ed25519PrivateKey, source: JwksSource
) -> None:
    for _ in range(5):
        await verifier.verify(sign(key, "k1"))
    assert source.calls == 1


async def test_forged_token_with_known_kid_is_refused(verifier: TokenVerifier) -> None:
    forger = Ed25519PrivateKey.generate()
    assert await refused(verifier, sign(forger, "k1")) == "token signature invalid"


async def test_tampered_claims_are_refused(verifier: TokenVerifier, key: Ed25519PrivateKey) -> None:
    head, _, signature = sign(key, "k1").split(".")
    body = b64url(json.dumps(claims(sub="root")).encode())
    assert await refused(verifier, f"{head}.{body}.{signature}") == "token signature invalid"


async def test_expired_token_is_refused(verifier: TokenVerifier, key: Ed25519PrivateKey) -> None:
    now = int(time.time())
    token = sign(key, "k1", iat=now - 1000, exp=now - 60)
    assert await refused(verifier, token) == "token expired"


async def test_expiry_within_leeway_is_accepted(
    verifier: TokenVerifier, key: Ed25519PrivateKey
) -> None:
    now = int(time.time())
    principal = await verifier.verify(sign(key, "k1", iat=now - 100, exp=now - 1))
    assert principal.subject == "alice"


@pytest.mark.parametrize("claim", ["iat", "nbf"])
async def test_not_yet_valid_token_is_refused(
    verifier: TokenVerifier, key: Ed25519PrivateKey, claim: str
) -> None:
    later = int(time.time()) + 120
    token = sign(key, "k1", **{claim: later, "exp": later + 600})
    assert await refused(verifier, token) == "token not yet valid"


async def test_wrong_issuer_is_refused(verifier: TokenVerifier, key: Ed25519PrivateKey) -> None:
    assert await refused(verifier, sign(key, "k1", iss="evil")) == "token issuer mismatch"


async def test_wrong_audience_is_refused(verifier: TokenVerifier, key: Ed25519PrivateKey) -> None:
    assert await refused(verifier, sign(key, "k1", aud="other")) == "token audience mismatch"


@pytest.mark.parametrize("claim", ["sub", "exp", "iat", "iss", "aud"])
async def test_missing_claim_is_refused(
    verifier: TokenVerifier, key: Ed25519PrivateKey, claim: str
) -> None:
    token = sign(key, "k1", **{claim: None})
    assert await refused(verifier, token) == f"token missing claim {claim}"


async def test_alg_none_is_refused(verifier: TokenVerifier, source: JwksSource) -> None:
    token = unsigned({"alg": "none", "typ": "JWT", "kid": "k1"}, claims())
    assert await refused(verifier, token) == "token algorithm not allowed"
    assert source.calls == 0  # refused before any key lookup


async def test_hs256_keyed_with_the_public_key_is_refused(
    verifier: TokenVerifier, key: Ed25519PrivateKey
) -> None:
    # The classic confusion: HMAC "signed" with the public key a verifier might
    # pass to a generic decode call.
    secret = public_raw(key)
    token = jwt.encode(claims(), secret, algorithm="HS256", headers={"kid": "k1"})
    assert await refused(verifier, token) == "token algorithm not allowed"


async def test_hmac_signature_under_an_eddsa_header_is_refused(
    verifier: TokenVerifier, key: Ed25519PrivateKey
) -> None:
    head = b64url(json.dumps({"alg": "EdDSA", "kid": "k1"}).encode())
    body = b64url(json.dumps(claims()).encode())
    mac = hmac.new(public_raw(key), f"{head}.{body}".encode(), hashlib.sha256).digest()
    assert await refused(verifier, f"{head}.{body}.{b64url(mac)}") == "token signature invalid"


@pytest.mark.parametrize(
    "token",
    ["", "garbage", "a.b.c", "a.b", "....", "eyJhbGciOiJFZERTQSJ9.%%%.abc", "\x00\xff"],
)
async def test_garbage_is_refused(verifier: TokenVerifier, token: str) -> None:
    assert await refused(verifier, token) == "malformed token"


async def test_token_without_kid_is_refused(
    verifier: TokenVerifier, key: Ed25519PrivateKey
) -> None:
    token = jwt.encode(claims(), key, algorithm="EdDSA")
    assert await refused(verifier, token) == "token has no key id"


async def test_empty_subject_is_refused(verifier: TokenVerifier, key: Ed25519PrivateKey) -> None:
    token = sign(key, "k1", sub="")
    assert await refused(verifier, token) == "token subject invalid"


async def test_unknown_kid_refetches_at_most_once_per_interval(
    verifier: TokenVerifier, key: Ed25519PrivateKey, source: JwksSource, clock: FakeClock
) -> None:
    await verifier.verify(sign(key, "k1"))
    assert source.calls == 1
    forger = Ed25519PrivateKey.generate()
    clock.now += 10
    assert await refused(verifier, sign(forger, "bogus-1")) == "token signed by unknown key"
    assert source.calls == 2
    # A flood of made-up kids inside the interval: no further calls to auth.
    tokens = [sign(forger, f"bogus-{i}") for i in range(50)]
    results = await asyncio.gather(*(verifier.verify(t) for t in tokens), return_exceptions=True)
    assert all(isinstance(r, Unauthenticated) for r in results)
    assert source.calls == 2
    clock.now += 5
    await refused(verifier, sign(forger, "bogus-again"))
    assert source.calls == 3


async def test_concurrent_first_use_fetches_once(
    verifier: TokenVerifier, key: Ed25519PrivateKey, source: JwksSource
) -> None:
    tokens = [sign(key, "k1", sub=f"user-{i}") for i in range(20)]
    principals = await asyncio.gather(*(verifier.verify(t) for t in tokens))
    assert [p.subject for p in principals] == [f"user-{i}" for i in range(20)]
    assert source.calls == 1


async def test_rotated_key_is_picked_up_and_withdrawn_key_dropped(
    verifier: TokenVerifier, key: Ed25519PrivateKey, source: JwksSource, clock: FakeClock
) -> None:
    await verifier.verify(sign(key, "k1"))
    new_key = Ed25519PrivateKey.generate()
    source.document = jwks(jwk(new_key, "k2"))
    clock.now += 10
    principal = await verifier.verify(sign(new_key, "k2", sub="bob"))
    assert principal.subject == "bob"
    assert await refused(verifier, sign(key, "k1")) == "token signed by unknown key"


async def test_auth_unreachable_before_any_keys_is_unavailable(
    verifier: TokenVerifier, key: Ed25519PrivateKey, source: JwksSource, clock: FakeClock
) -> None:
    source.fail = ConnectionError("refused")
    with pytest.raises(Unavailable):
        await verifier.verify(sign(key, "k1"))
    # Not retried within the interval, still unavailable (not "invalid token").
    with pytest.raises(Unavailable):
        await verifier.verify(sign(key, "k1"))
    assert source.calls == 1
    source.fail = None
    clock.now += 5
    assert (await verifier.verify(sign(key, "k1"))).subject == "alice"


async def test_a_failed_fetch_is_retried_within_a_fraction_of_a_second(
    verifier: TokenVerifier, key: Ed25519PrivateKey, source: JwksSource, clock: FakeClock
) -> None:
    # A gateway (re)started while auth was down: tokens verify as soon as auth is
    # back, not a whole refetch interval later.
    source.fail = ConnectionError("refused")
    with pytest.raises(Unavailable):
        await verifier.verify(sign(key, "k1"))
    source.fail = None
    clock.now += RETRY_FAILED_FETCH_S
    assert (await verifier.verify(sign(key, "k1"))).subject == "alice"
    assert source.calls == 2
    # Once fetched, unknown kids are again limited to one refetch per interval.
    forger = Ed25519PrivateKey.generate()
    clock.now += RETRY_FAILED_FETCH_S
    await refused(verifier, sign(forger, "bogus"))
    assert source.calls == 2


async def test_jwks_keeps_only_ed25519_signing_keys(key: Ed25519PrivateKey) -> None:
    document = jwks(
        jwk(key, "good"),
        {"kty": "RSA", "kid": "rsa", "n": "AQAB", "e": "AQAB"},
        {"kty": "oct", "kid": "sym", "k": "c2VjcmV0"},
        {**jwk(key, "enc"), "use": "enc"},
        {**jwk(key, "bad-x"), "x": "!!"},
    )
    assert set(parse_jwks(document)) == {"good"}


async def test_symmetric_jwk_cannot_be_used_to_verify(key: Ed25519PrivateKey) -> None:
    # Even if auth's JWKS somehow listed an HMAC key, it never becomes a verification key.
    source = JwksSource(jwks({"kty": "oct", "kid": "sym", "k": b64url(b"secret")}))
    verifier = TokenVerifier(source, ISSUER, AUDIENCE)
    token = jwt.encode(claims(), b"secret" * 6, algorithm="HS256", headers={"kid": "sym"})
    assert await refused(verifier, token) == "token algorithm not allowed"
    forged = unsigned({"alg": "EdDSA", "kid": "sym"}, claims(), b"x" * 64)
    assert await refused(verifier, forged) == "token signed by unknown key"


@pytest.mark.parametrize("document", ["not json", "[]", '{"keys": {}}', "{}"])
async def test_malformed_jwks_is_unavailable(key: Ed25519PrivateKey, document: str) -> None:
    verifier = TokenVerifier(JwksSource(document), ISSUER, AUDIENCE)
    with pytest.raises(Unavailable):
        await verifier.verify(sign(key, "k1"))


def test_bearer_token_extracts_the_token() -> None:
    assert bearer_token([("authorization", "Bearer abc.def.ghi")]) == "abc.def.ghi"
    assert bearer_token([("x-other", "1"), ("authorization", "bearer  tok ")]) == "tok"
    assert bearer_token((("authorization", b"Bearer tok"),)) == "tok"


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (None, "missing bearer token"),
        ([], "missing bearer token"),
        ([("x-other", "Bearer tok")], "missing bearer token"),
        ([("authorization", "Bearer ")], "missing bearer token"),
        ([("authorization", "Basic dXNlcjpwYXNz")], "authorization is not a bearer token"),
        ([("authorization", "tok")], "authorization is not a bearer token"),
        (
            [("authorization", "Bearer a"), ("authorization", "Bearer b")],
            "more than one authorization header",
        ),
    ],
)
def test_bearer_token_refusals(metadata: list[tuple[str, str]] | None, message: str) -> None:
    with pytest.raises(Unauthenticated) as info:
        bearer_token(metadata)
    assert str(info.value) == message


class WallClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def test_a_verified_token_is_not_verified_again_until_it_expires(
    verifier: TokenVerifier, key: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    wall = WallClock()
    authenticator = Authenticator(verifier, {}, VerifiedTokens(wall_clock=wall))
    decodes = 0
    real_decode = verifier._decode

    def counting_decode(token: str, k: Any) -> dict[str, Any]:
        nonlocal decodes
        decodes += 1
        return real_decode(token, k)

    monkeypatch.setattr(verifier, "_decode", counting_decode)
    exp = int(wall.now) + 60
    token = sign(key, "k1", exp=exp)
    for _ in range(5):
        assert (await authenticator.verify(token)).subject == "alice"
    assert decodes == 1
    wall.now = exp  # expired: verified again (and refused once past the leeway)
    assert (await authenticator.verify(token)).subject == "alice"
    assert decodes == 2
    wall.now = exp + 0.5
    await authenticator.verify(token)
    assert decodes == 3


async def test_a_key_change_forgets_verified_tokens(
    verifier: TokenVerifier, key: Ed25519PrivateKey, source: JwksSource, clock: FakeClock
) -> None:
    authenticator = Authenticator(verifier, {})
    token = sign(key, "k1")
    await authenticator.verify(token)
    assert len(authenticator.verified) == 1
    await verifier.refresh()  # the same keys: nothing forgotten
    assert len(authenticator.verified) == 1
    source.document = jwks(jwk(Ed25519PrivateKey.generate(), "k2"))  # k1 withdrawn
    await verifier.refresh()
    assert len(authenticator.verified) == 0
    with pytest.raises(Unauthenticated, match="unknown key"):
        await authenticator.verify(token)


async def test_refused_tokens_are_not_remembered(
    verifier: TokenVerifier, key: Ed25519PrivateKey
) -> None:
    authenticator = Authenticator(verifier, {})
    for _ in range(2):
        with pytest.raises(Unauthenticated, match="expired"):
            await authenticator.verify(sign(key, "k1", exp=int(time.time()) - 60))
    assert len(authenticator.verified) == 0


async def test_a_verification_racing_a_key_change_is_not_remembered(
    verifier: TokenVerifier, key: Ed25519PrivateKey
) -> None:
    verified = VerifiedTokens(max_entries=2)
    principal = Principal("alice", time.time() + 60)
    generation = verified.generation
    verified.clear()
    verified.put("t", principal, generation)
    assert verified.get("t") is None
    for name in ("a", "b", "c"):
        verified.put(name, principal, verified.generation)
    assert len(verified) == 2
    assert verified.get("a") is None
    assert verified.get("c") == principal
