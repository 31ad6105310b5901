"""A checksum inside small state files, so a flipped bit is found rather than believed.

Storage's state files besides segments and the WAL (the manifest, cursors, the
owner epoch) are small text. A flipped digit still parses: a cursor's
`ack_floor` 120 read as 121 would silently ack a message, an epoch 7 read as 5
would let a stale owner back in. So each carries a CRC-32 of its content:

- JSON documents (`dumps_checked` / `loads_checked`) get a ``"crc32"`` member,
  the CRC of the document's canonical form (sorted keys, no spaces) without
  it, so the check does not depend on how the file is indented;
- one-line values (`line_checked` / `parse_line_checked`) are written as
  ``<value> crc32:<8 hex>``.

A file written before checksums existed (no ``crc32``) is read as it is.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

CHECKSUM_KEY = "crc32"


class ChecksumMismatch(ValueError):
    """The content does not match its recorded checksum."""


def _crc(text: str) -> str:
    return f"{zlib.crc32(text.encode()) & 0xFFFFFFFF:08x}"


def _canonical(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def dumps_checked(doc: dict[str, Any], *, indent: int | None = None) -> bytes:
    """`doc` as JSON with its checksum member added (last)."""
    return json.dumps({**doc, CHECKSUM_KEY: _crc(_canonical(doc))}, indent=indent).encode()


def loads_checked(raw: bytes, members: frozenset[str]) -> dict[str, Any]:
    """The JSON object of `raw`, whose members are among `members` (and the checksum).

    Raises ValueError if it is not such an object (a flipped bit in a member's
    name, the checksum's included, shows as an unknown member), ChecksumMismatch
    if its checksum does not match the rest.
    """
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
    unknown = set(doc) - members - {CHECKSUM_KEY}
    if unknown:
        raise ValueError(f"unknown members {sorted(unknown)}")
    if CHECKSUM_KEY in doc:
        recorded = doc.pop(CHECKSUM_KEY)
        actual = _crc(_canonical(doc))
        if recorded != actual:
            raise ChecksumMismatch(f"checksum {actual} differs from the recorded {recorded!r}")
    return doc


def line_checked(value: str) -> bytes:
    """A one-line value with its checksum: ``<value> crc32:<hex>``."""
    return f"{value} {CHECKSUM_KEY}:{_crc(value)}\n".encode()


def parse_line_checked(text: str) -> str:
    """The value of a `line_checked` line (or of a bare line written before checksums)."""
    value, separator, _ = text.partition(" ")
    if not separator and CHECKSUM_KEY not in text:
        return text.strip()  # written before checksums
    if line_checked(value).decode() != text:  # the whole line, its newline included
        raise ChecksumMismatch(f"{text[:60]!r} does not match its checksum")
    return value
