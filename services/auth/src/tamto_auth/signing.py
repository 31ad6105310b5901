"""Ed25519 signing keys for tokens, persisted as PEM files in the data directory.

Layout: `<dir>/<kid>.pem`, one PKCS#8 private key per file, mode 0600, in a
directory of mode 0700. A key's `kid` is its RFC 7638 JWK thumbprint, so it is
derived from the key itself and the same key always has the same id. Files are
written atomically (`tamto_common.durable.write_atomic`): a crash never leaves a
half-written key that would stop the service from starting, and an empty or
unreadable key file stops it with a message naming the file.

The newest file (by modification time) signs; every key loaded is published
in the JWKS so tokens signed by an older key keep verifying until they expire.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path

import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tamto_common.durable import DamagedFile, fsync_dir, make_dirs, read_whole, write_atomic
from tamto_common.errors import ConfigError

log = structlog.get_logger(__name__)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _public_bytes(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def thumbprint(key: Ed25519PrivateKey) -> str:
    """The RFC 7638 JWK thumbprint (SHA-256, base64url) of the key's public half."""
    # Members in lexicographic order, no whitespace: the canonical form RFC 7638 hashes.
    canonical = json.dumps(
        {"crv": "Ed25519", "kty": "OKP", "x": _b64url(_public_bytes(key))},
        separators=(",", ":"),
        sort_keys=True,
    )
    return _b64url(hashlib.sha256(canonical.encode()).digest())


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One Ed25519 key and its id."""

    kid: str
    private_key: Ed25519PrivateKey

    def public_jwk(self) -> dict[str, str]:
        """The public half as a JWK (RFC 8037)."""
        return {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": _b64url(_public_bytes(self.private_key)),
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        }


@dataclass(frozen=True, slots=True)
class SigningKeys:
    """The keys the service knows: `current` signs, all of `keys` verify."""

    current: SigningKey
    keys: tuple[SigningKey, ...]

    def jwks(self) -> str:
        """The JWKS JSON document of every public key."""
        return json.dumps({"keys": [k.public_jwk() for k in self.keys]}, sort_keys=True)


def load_or_create(directory: Path) -> SigningKeys:
    """Load every key under `directory`, creating the directory and a first key if none."""
    make_dirs(directory, mode=0o700)
    loaded = [_load(path) for path in _key_files(directory)]
    if not loaded:
        key = Ed25519PrivateKey.generate()
        loaded = [(_write(directory, key), 0.0)]
        log.info("signing key created", kid=loaded[0][0].kid)
    # Newest signs; the kid breaks ties so the choice is deterministic.
    ordered = sorted(loaded, key=lambda pair: (pair[1], pair[0].kid), reverse=True)
    keys = tuple(key for key, _ in ordered)
    log.info("signing keys loaded", current=keys[0].kid, count=len(keys))
    return SigningKeys(current=keys[0], keys=keys)


def _key_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.pem") if p.is_file())


def _load(path: Path) -> tuple[SigningKey, float]:
    try:
        key = serialization.load_pem_private_key(read_whole(path, "signing key"), password=None)
    except DamagedFile as exc:
        raise ConfigError("--data-dir", f"{exc}: delete it to start with a new key") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError("--data-dir", f"unreadable signing key {path}: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError("--data-dir", f"signing key {path} is not an Ed25519 key")
    kid = thumbprint(key)
    if path.stem != kid:
        # A renamed file would publish a kid that no longer matches the key.
        raise ConfigError("--data-dir", f"signing key {path} does not match its name (kid {kid})")
    return SigningKey(kid=kid, private_key=key), path.stat().st_mtime


def _write(directory: Path, key: Ed25519PrivateKey) -> SigningKey:
    kid = thumbprint(key)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Mode 0600 from the first byte: the key is never readable by others.
    write_atomic(directory / f"{kid}.pem", pem, mode=0o600)
    return SigningKey(kid=kid, private_key=key)


def rotate(directory: Path, retain_s: float, now: float | None = None) -> SigningKeys:
    """Make a new current key, drop keys retired more than `retain_s` ago, reload.

    A key retires when the next one is created; tokens it signed keep verifying
    while it stays in the JWKS, so `retain_s` must be at least the token lifetime.
    """
    key = _write(directory, Ed25519PrivateKey.generate())
    log.info("signing key rotated", current=key.kid)
    prune(directory, retain_s, now)
    return load_or_create(directory)


def prune(directory: Path, retain_s: float, now: float | None = None) -> list[str]:
    """Delete every non-current key whose successor is older than `retain_s`; their kids."""
    moment = time.time() if now is None else now
    files = sorted(_key_files(directory), key=lambda p: (p.stat().st_mtime, p.stem))
    removed: list[str] = []
    for older, newer in itertools.pairwise(files):
        if moment - newer.stat().st_mtime > retain_s:
            older.unlink()
            removed.append(older.stem)
    if removed:
        fsync_dir(directory)
        log.info("signing keys retired", kids=removed)
    return removed


def current_age_s(directory: Path, now: float | None = None) -> float:
    """Seconds since the newest key under `directory` was created (inf if none)."""
    files = _key_files(directory)
    if not files:
        return float("inf")
    moment = time.time() if now is None else now
    return moment - max(p.stat().st_mtime for p in files)
