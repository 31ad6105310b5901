"""The one hash that maps a key to a partition, shared by the SDK and servers."""

from __future__ import annotations

import hashlib


def key_hash(key: bytes) -> int:
    """A stable 64-bit hash of `key` (BLAKE2b, 8 bytes, big-endian)."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition a keyed message belongs to: `hash(key) mod partitions`."""
    if partitions <= 0:
        raise ValueError("partitions must be positive")
    return key_hash(key) % partitions
