"""Durable subscription cursors of one partition.

Each cursor is ``<partition-dir>/cursors/<subscription>.json``::

    {"version": 1, "ack_floor": 120, "acked_above_floor": [[122, 130], [140, 140]]}

Every offset below ``ack_floor`` is acked; the ranges (inclusive, sorted,
disjoint, above the floor) hold the acks beyond it. A commit replaces the file
atomically (temp file, fsync, rename, fsync dir), so a crash leaves either the
old cursor or the new one. Epoch fencing is the partition's job.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tamto_common.errors import DataCorruption, InvalidArgument
from tamto_common.names import check_name
from tamto_storage.durable import make_dirs, write_atomic
from tamto_storage.model import Cursor, OffsetRange

_VERSION = 1


def check_cursor(cursor: Cursor) -> None:
    """Raise InvalidArgument unless the floor and ranges are consistent."""
    if cursor.ack_floor < 0:
        raise InvalidArgument(f"ack_floor must not be negative, got {cursor.ack_floor}")
    previous_last = cursor.ack_floor
    for r in cursor.acked_above_floor:
        if r.first > r.last:
            raise InvalidArgument(f"acked range {r.first}-{r.last} is reversed")
        if r.first <= previous_last:
            raise InvalidArgument(
                f"acked range {r.first}-{r.last} must start above {previous_last} "
                "(ranges are sorted, disjoint, above ack_floor)"
            )
        previous_last = r.last


class CursorStore:
    """Reads and atomically writes the cursors of one partition."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        # One commit at a time, so the last commit called is the one that stays.
        self._lock = asyncio.Lock()

    def _path(self, subscription: str) -> Path:
        return self._dir / f"{check_name('subscription', subscription)}.json"

    async def commit(self, subscription: str, cursor: Cursor) -> None:
        """Durably replace the subscription's cursor."""
        path = self._path(subscription)
        check_cursor(cursor)
        data = json.dumps(
            {
                "version": _VERSION,
                "ack_floor": cursor.ack_floor,
                "acked_above_floor": [[r.first, r.last] for r in cursor.acked_above_floor],
            }
        ).encode()
        async with self._lock:
            await asyncio.to_thread(_write, path, data)

    async def get(self, subscription: str) -> Cursor | None:
        """The subscription's cursor, or None if none was ever committed."""
        path = self._path(subscription)
        raw = await asyncio.to_thread(_read, path)
        return None if raw is None else _decode(path, raw)


def _write(path: Path, data: bytes) -> None:
    make_dirs(path.parent)
    write_atomic(path, data)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _decode(path: Path, raw: bytes) -> Cursor:
    try:
        doc: Any = json.loads(raw)
        if doc["version"] != _VERSION:
            raise ValueError(f"unknown version {doc['version']!r}")
        ranges = tuple(OffsetRange(int(f), int(last)) for f, last in doc["acked_above_floor"])
        return Cursor(int(doc["ack_floor"]), ranges)
    except (ValueError, KeyError, TypeError) as exc:
        raise DataCorruption(f"cursor file {path} is unreadable: {exc}") from None
