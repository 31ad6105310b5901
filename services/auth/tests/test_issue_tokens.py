"""Issued tokens: EdDSA, header kid, and exactly the promised claims."""

from __future__ import annotations

from pathlib import Path

import jwt

from tamto_auth.signing import load_or_create
from tamto_auth.tokens import TokenIssuer


def test_issued_token_carries_claims_and_kid(tmp_path: Path) -> None:
    keys = load_or_create(tmp_path)
    issuer = TokenIssuer(keys, "tamto-iss", "tamto-aud", ttl_s=900, clock=lambda: 1_700_000_000.5)
    issued = issuer.issue("alice")
    assert issued.subject == "alice"
    assert issued.expires_at == 1_700_000_900
    header = jwt.get_unverified_header(issued.token)
    assert header["alg"] == "EdDSA"
    assert header["kid"] == keys.current.kid
    claims = jwt.decode(
        issued.token,
        keys.current.private_key.public_key(),
        algorithms=["EdDSA"],
        audience="tamto-aud",
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims == {
        "iss": "tamto-iss",
        "aud": "tamto-aud",
        "sub": "alice",
        "iat": 1_700_000_000,
        "exp": 1_700_000_900,
    }
