"""Signing keys: created once, persisted privately, reloaded identically."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tamto_auth.signing import load_or_create, thumbprint
from tamto_common.errors import ConfigError


def test_first_start_creates_one_private_key(tmp_path: Path) -> None:
    directory = tmp_path / "auth" / "signing-keys"
    keys = load_or_create(directory)
    files = list(directory.iterdir())
    assert [f.name for f in files] == [f"{keys.current.kid}.pem"]
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert keys.keys == (keys.current,)


def test_reload_gives_the_same_key_and_jwks(tmp_path: Path) -> None:
    first = load_or_create(tmp_path)
    second = load_or_create(tmp_path)
    assert second.current.kid == first.current.kid
    assert second.jwks() == first.jwks()
    assert len(list(tmp_path.iterdir())) == 1


def test_jwks_describes_the_public_key(tmp_path: Path) -> None:
    keys = load_or_create(tmp_path)
    document = json.loads(keys.jwks())
    (entry,) = document["keys"]
    assert entry["kty"] == "OKP"
    assert entry["crv"] == "Ed25519"
    assert entry["alg"] == "EdDSA"
    assert entry["use"] == "sig"
    assert entry["kid"] == keys.current.kid
    assert "d" not in entry  # never the private part
    # The published key verifies what the private key signs.
    public = jwt.PyJWK(entry).key
    token = jwt.encode({"sub": "x"}, keys.current.private_key, algorithm="EdDSA")
    assert jwt.decode(token, public, algorithms=["EdDSA"]) == {"sub": "x"}


def test_kid_is_the_rfc7638_thumbprint(tmp_path: Path) -> None:
    keys = load_or_create(tmp_path)
    entry = json.loads(keys.jwks())["keys"][0]
    expected = jwt.PyJWK(entry).key  # sanity: valid JWK
    assert expected is not None
    assert keys.current.kid == thumbprint(keys.current.private_key)
    # RFC 8037 appendix A.3 test vector.
    vector = Ed25519PrivateKey.from_private_bytes(
        bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    )
    assert thumbprint(vector) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_all_keys_are_published_and_the_newest_signs(tmp_path: Path) -> None:
    old = load_or_create(tmp_path).current
    os.utime(tmp_path / f"{old.kid}.pem", (1_000_000, 1_000_000))
    newer = Ed25519PrivateKey.generate()
    kid = thumbprint(newer)
    pem = newer.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / f"{kid}.pem").write_bytes(pem)
    keys = load_or_create(tmp_path)
    assert keys.current.kid == kid
    assert {k["kid"] for k in json.loads(keys.jwks())["keys"]} == {old.kid, kid}


def test_leftover_temporary_files_are_ignored(tmp_path: Path) -> None:
    (tmp_path / ".abc.1234.tmp").write_bytes(b"half a key")
    keys = load_or_create(tmp_path)
    assert (tmp_path / f"{keys.current.kid}.pem").exists()


def test_corrupt_key_file_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "broken.pem").write_bytes(b"-----BEGIN PRIVATE KEY-----\nnope\n")
    with pytest.raises(ConfigError, match="unreadable signing key"):
        load_or_create(tmp_path)


def test_renamed_key_file_stops_the_start(tmp_path: Path) -> None:
    keys = load_or_create(tmp_path)
    (tmp_path / f"{keys.current.kid}.pem").rename(tmp_path / "renamed.pem")
    with pytest.raises(ConfigError, match="does not match its name"):
        load_or_create(tmp_path)


def test_empty_key_file_stops_the_start_naming_it(tmp_path: Path) -> None:
    # What a crash of a non-atomic writer leaves: the name, no content.
    (tmp_path / "abc.pem").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"signing key .*abc.pem is empty"):
        load_or_create(tmp_path)
