"""API-key identities in etcd: salted hashes only, verified in constant time.

Layout: `/tamto/auth/keys/<key_id>` holds JSON

    {"subject": str, "kdf": "scrypt", "n": int, "r": int, "p": int,
     "salt": base64, "hash": base64, "created_at": unix seconds, "disabled": bool}

Hash: scrypt (n=2**14, r=8, p=1, 32 bytes) over the secret with a 16-byte random
salt. The secrets are random with about 256 bits, so the KDF's cost is a second
line of defence should etcd leak, not what makes guessing infeasible; scrypt is
memory-hard, in the standard library, and its parameters travel with each record
so they can be raised later without invalidating existing keys. Hashing runs in
a worker thread: each verification costs tens of milliseconds of CPU that must
not stall the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

import aetcd
import structlog

from tamto_common.apikeys import ApiKey, check_key_id, new_api_key
from tamto_common.errors import DataLoss, NotFound, Unauthenticated
from tamto_common.policy import KEYS_PREFIX as KEYS_PREFIX

SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
HASH_BYTES = 32
SALT_BYTES = 16
# One message for unknown, disabled and wrong-secret keys: a caller cannot tell
# which key ids exist.
INVALID = "invalid API key"

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """What etcd holds for one API key."""

    subject: str
    salt: str
    hash: str
    created_at: float
    disabled: bool = False
    kdf: str = "scrypt"
    n: int = SCRYPT_N
    r: int = SCRYPT_R
    p: int = SCRYPT_P

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> KeyRecord:
        try:
            fields: dict[str, Any] = json.loads(data)
            record = cls(**fields)
        except (ValueError, TypeError) as exc:
            raise DataLoss(f"unreadable API key record: {exc}") from None
        if record.kdf != "scrypt":
            raise DataLoss(f"API key record uses unknown kdf {record.kdf!r}")
        return record

    def matches(self, secret: str) -> bool:
        """Whether `secret` hashes to this record's hash (constant-time comparison)."""
        digest = _scrypt(secret, base64.b64decode(self.salt), self.n, self.r, self.p)
        return hmac.compare_digest(digest, base64.b64decode(self.hash))


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        secret.encode(), salt=salt, n=n, r=r, p=p, maxmem=2 * 128 * r * n, dklen=HASH_BYTES
    )


def new_record(secret: str, subject: str, now: float | None = None) -> KeyRecord:
    """A record for `secret` with a fresh salt."""
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _scrypt(secret, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return KeyRecord(
        subject=subject,
        salt=base64.b64encode(salt).decode(),
        hash=base64.b64encode(digest).decode(),
        created_at=time.time() if now is None else now,
    )


# Hashed when the key id is unknown, so an unknown id costs the same time as a known one.
_DUMMY = new_record(secrets.token_urlsafe(32), "-", now=0.0)


class ApiKeyStore:
    """API-key identities kept in etcd under `prefix` (tests use their own)."""

    def __init__(self, etcd: aetcd.Client, prefix: str = KEYS_PREFIX) -> None:
        self._etcd = etcd
        self._prefix = prefix

    def _key(self, key_id: str) -> bytes:
        """The etcd key of `key_id`; `InvalidArgument` naming the field for a malformed
        id, before anything is looked up (an id with `/` would reach other records)."""
        return f"{self._prefix}{check_key_id(key_id)}".encode()

    async def _get(self, key_id: str) -> KeyRecord | None:
        got = await self._etcd.get(self._key(key_id))
        return None if got is None else KeyRecord.from_json(got.value)

    async def ensure_key(self, api_key: ApiKey, subject: str) -> None:
        """Make `api_key` authenticate as `subject`; a no-op when it already does.

        A record that already matches the secret and subject is left alone,
        including its `disabled` flag: restarting with the same key does not undo
        an operator's decision to disable it.
        """
        existing = await self._get(api_key.key_id)
        if (
            existing is not None
            and existing.subject == subject
            and await asyncio.to_thread(existing.matches, api_key.secret)
        ):
            return
        record = await asyncio.to_thread(new_record, api_key.secret, subject)
        await self._etcd.put(self._key(api_key.key_id), record.to_json())
        log.info(
            "api key stored",
            key=api_key.redacted(),
            subject=subject,
            replaced=existing is not None,
        )

    async def set_disabled(self, key_id: str, disabled: bool) -> KeyRecord:
        """Disable or re-enable a key (an operator action); raises `NotFound` for an unknown id."""
        existing = await self._get(key_id)
        if existing is None:
            raise NotFound(f"no API key with id {key_id}")
        updated = KeyRecord(**{**asdict(existing), "disabled": disabled})
        await self._etcd.put(self._key(key_id), updated.to_json())
        return updated

    async def delete(self, key_id: str) -> KeyRecord:
        """Remove a key for good and return its last record; `NotFound` for an unknown id."""
        got = await self._etcd.delete(self._key(key_id), prev_kv=True)
        if not got or got.prev_kv is None:
            raise NotFound(f"no API key with id {key_id}")
        return KeyRecord.from_json(got.prev_kv.value)

    async def get(self, key_id: str) -> KeyRecord:
        """The record of `key_id`; `NotFound` if there is none."""
        record = await self._get(key_id)
        if record is None:
            raise NotFound(f"no API key with id {key_id}")
        return record

    async def create(self, subject: str) -> tuple[ApiKey, KeyRecord]:
        """A new random key for `subject`: the key (to show once) and its stored record."""
        tx = self._etcd.transactions
        while True:
            api_key = new_api_key()
            record = await asyncio.to_thread(new_record, api_key.secret, subject)
            key = self._key(api_key.key_id)
            created, _ = await self._etcd.transaction(
                compare=[tx.version(key) == 0], success=[tx.put(key, record.to_json())], failure=[]
            )
            if created:  # else: a 48-bit key id collided; draw again
                log.info("api key created", key=api_key.redacted(), subject=subject)
                return api_key, record

    async def list(self) -> list[tuple[str, KeyRecord]]:
        """Every key as (key id, record), sorted by key id."""
        result = await self._etcd.get_prefix(self._prefix.encode())
        out = []
        for kv in result:
            key_id = kv.key.decode()[len(self._prefix) :]
            out.append((key_id, KeyRecord.from_json(kv.value)))
        return sorted(out, key=lambda pair: pair[0])

    async def verify(self, api_key: ApiKey) -> str:
        """The subject `api_key` authenticates as; `Unauthenticated("invalid API key")` if none."""
        record = await self._get(api_key.key_id)
        checked = _DUMMY if record is None else record
        ok = await asyncio.to_thread(checked.matches, api_key.secret)
        if record is None or record.disabled or not ok:
            raise Unauthenticated(INVALID)
        return record.subject
