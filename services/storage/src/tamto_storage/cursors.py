"""Durable subscription cursors of one partition.

Each cursor is ``<partition-dir>/_cursors/<subscription>.json``::

    {"version": 1, "ack_floor": 120, "acked_above_floor": [[122, 130], [140, 140]],
     "redeliveries": 7, "dead_lettered": 2, "crc32": "..."}

Every offset below ``ack_floor`` is acked; the ranges (inclusive, sorted,
disjoint, above the floor) hold the acks beyond it. ``redeliveries`` and
``dead_lettered`` are the subscription's counts on the partition (absent in files
written before they existed: 0); they only grow, so every commit keeps the highest
of what is stored and what is committed, a seek's too. A commit replaces the file
atomically (temp file, fsync, rename, fsync dir), so a crash leaves either the
old cursor or the new one; ``crc32`` (`tamto_protocol.checked`) finds a flipped
bit. Epoch fencing is the partition's job.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from tamto_common.durable import make_dirs, write_atomic
from tamto_common.errors import DataLoss, InvalidArgument
from tamto_common.names import check_name
from tamto_protocol.checked import dumps_checked, loads_checked
from tamto_storage.model import Cursor, OffsetRange

_VERSION = 1
_MEMBERS = frozenset({"version", "ack_floor", "acked_above_floor", "redeliveries", "dead_lettered"})


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


def merge_cursors(a: Cursor, b: Cursor) -> Cursor:
    """The union of two cursors' acks (every offset acked in either is acked)."""
    floor = max(a.ack_floor, b.ack_floor)
    ranges = sorted(
        (max(r.first, floor), r.last)
        for r in (*a.acked_above_floor, *b.acked_above_floor)
        if r.last >= floor
    )
    merged: list[tuple[int, int]] = []
    for first, last in ranges:
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    if merged and merged[0][0] <= floor:
        floor = merged.pop(0)[1] + 1
    return Cursor(
        floor,
        tuple(OffsetRange(f, last) for f, last in merged),
        max(a.redeliveries, b.redeliveries),
        max(a.dead_lettered, b.dead_lettered),
    )


def with_counts_of(stored: Cursor, cursor: Cursor) -> Cursor:
    """`cursor` with the higher of its and `stored`'s counts (they never go back)."""
    return replace(
        cursor,
        redeliveries=max(stored.redeliveries, cursor.redeliveries),
        dead_lettered=max(stored.dead_lettered, cursor.dead_lettered),
    )


class CursorStore:
    """Reads and atomically writes the cursors of one partition."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        # One commit at a time, so the last commit called is the one that stays.
        self._lock = asyncio.Lock()

    def _path(self, subscription: str) -> Path:
        # A multicast consumer's cursor is "<subscription>~<consumer>": both legal names.
        for part in subscription.split("~", 1):
            check_name("subscription", part)
        return self._dir / f"{subscription}.json"

    async def commit(self, subscription: str, cursor: Cursor, replace: bool = False) -> None:
        """Durably add `cursor`'s acks to the subscription's cursor.

        Acks only ever accumulate: the stored cursor becomes the union of what it
        held and what is committed. So commits that arrive out of order (a session
        of a reloaded subscription still acking while the new one commits) can
        never move a cursor back and resurrect acknowledged messages. Only a seek
        (`replace`, subscription administration) stores `cursor` as it is.
        """
        path = self._path(subscription)
        check_cursor(cursor)
        async with self._lock:
            raw = await asyncio.to_thread(_read, path)
            if raw is not None:
                stored = _decode(path, raw)
                merged = with_counts_of if replace else merge_cursors
                cursor = merged(stored, cursor)
            data = dumps_checked(
                {
                    "version": _VERSION,
                    "ack_floor": cursor.ack_floor,
                    "acked_above_floor": [[r.first, r.last] for r in cursor.acked_above_floor],
                    "redeliveries": cursor.redeliveries,
                    "dead_lettered": cursor.dead_lettered,
                }
            )
            await asyncio.to_thread(_write, path, data)

    async def get(self, subscription: str) -> Cursor | None:
        """The subscription's cursor, or None if none was ever committed."""
        path = self._path(subscription)
        raw = await asyncio.to_thread(_read, path)
        return None if raw is None else _decode(path, raw)

    async def delete(self, subscription: str) -> bool:
        """Remove the subscription's cursor; False when it had none."""
        path = self._path(subscription)
        async with self._lock:
            return await asyncio.to_thread(_remove, path)

    async def names(self) -> list[str]:
        """The subscriptions with a cursor, sorted (their files are not read)."""
        return sorted(await asyncio.to_thread(_names, self._dir))

    async def all(self) -> dict[str, Cursor]:
        """Every committed cursor of the partition, by subscription (interest retention).

        Raises DataLoss when one is unreadable: the caller must then not
        assume anything is acked.
        """
        # Commits replace files atomically: each read sees a whole cursor.
        found = await asyncio.to_thread(_read_all, self._dir)
        return {name: _decode(path, raw) for name, (path, raw) in found.items()}


def _write(path: Path, data: bytes) -> None:
    make_dirs(path.parent)
    write_atomic(path, data)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _names(directory: Path) -> list[str]:
    try:
        return [
            p.stem
            for p in directory.iterdir()
            if p.suffix == ".json" and not p.name.startswith(".")
        ]
    except FileNotFoundError:
        return []


def _read_all(directory: Path) -> dict[str, tuple[Path, bytes]]:
    found: dict[str, tuple[Path, bytes]] = {}
    try:
        paths = [p for p in directory.iterdir() if p.suffix == ".json"]
    except FileNotFoundError:
        return found
    for path in paths:
        if path.name.startswith("."):
            continue  # a commit's temporary file
        raw = _read(path)
        if raw is not None:
            found[path.stem] = (path, raw)
    return found


def _decode(path: Path, raw: bytes) -> Cursor:
    try:
        doc: Any = loads_checked(raw, _MEMBERS)
        if doc["version"] != _VERSION:
            raise ValueError(f"unknown version {doc['version']!r}")
        ranges = tuple(OffsetRange(int(f), int(last)) for f, last in doc["acked_above_floor"])
        return Cursor(
            int(doc["ack_floor"]),
            ranges,
            int(doc.get("redeliveries", 0)),
            int(doc.get("dead_lettered", 0)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise DataLoss(f"cursor file {path} is unreadable: {exc}") from None


def read_cursor_file(path: Path) -> Cursor:
    """The cursor a file holds (blocking); DataLoss if it is unreadable."""
    return _decode(path, path.read_bytes())
