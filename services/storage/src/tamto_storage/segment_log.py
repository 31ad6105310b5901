"""The sealed part of one partition: its committed segments, in offset order.

Segments are contiguous and never overlap: each new one starts where the last
ended (`end_offset`). Retention removes whole segments from the front and
raises `floor`, the partition's first readable sealed offset; their files stay
on disk for a grace period (see `tamto_storage.sealer`) so a Spark job that
listed them can finish reading. Interest retention may also `replace` a run of
segments by one covering the same range with fewer rows, so a segment's range
can hold offsets it no longer stores: reads skip to the next stored one.

Integrity: before a segment is first read its file digest is checked against
the manifest's (once per file and process, `VerifiedFiles`), and every page
decoded is checked against its CRC. A segment that fails, or whose footer was
unreadable at load, is recorded in `damaged` and every read of its range
raises DATA_LOSS naming the file and the range; the other segments are
unaffected.

With a segment store (`tamto_storage.store_cache`), a segment's local file
may have been reclaimed once the store committed it: reads of its range then
go to `fetch`, which gives a local copy of the store's object.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import structlog

from tamto_common.errors import DataLoss, damaged_offsets_error
from tamto_storage import segment_reads
from tamto_storage.integrity import VerifiedFiles
from tamto_storage.model import StoredBatch
from tamto_storage.recorded import FILE_MISSING
from tamto_storage.segment_reads import DecodedGroups
from tamto_storage.segments import Segment

log = structlog.get_logger(__name__)
_T = TypeVar("_T")


class SegmentLog:
    """The committed segments of one partition."""

    def __init__(
        self, found: list[Segment], floor: int = 0, decoded_groups: DecodedGroups | None = None
    ) -> None:
        """`decoded_groups`: where reads keep decoded row groups (None: nowhere)."""
        self._decoded_groups = decoded_groups
        self._verified = VerifiedFiles()
        #: Damaged segment files, by path: what is wrong with each.
        self.damaged: dict[Path, str] = {}
        self._segments: list[Segment] = []
        self._firsts: list[int] = []
        self.floor = floor
        #: Where a segment whose local file is gone is read from (None: nowhere).
        self._fetch: Callable[[Segment], Path] | None = None
        for segment in found:
            self.add(segment)

    def serve_missing_from(self, fetch: Callable[[Segment], Path]) -> None:
        """Read segments whose local file is gone (reclaimed) from `fetch`'s copy
        (blocking, called in a worker thread); those found missing at load too."""
        self._fetch = fetch
        for path, damage in list(self.damaged.items()):
            if damage == FILE_MISSING:
                del self.damaged[path]

    def local_path(self, segment: Segment) -> Path:
        """A file with `segment`'s bytes: its own, or a copy from the store (blocking)."""
        if self._fetch is None or segment.path.exists():
            return segment.path
        return self._fetch(segment)

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    @property
    def start_offset(self) -> int | None:
        """The first sealed offset still kept, or None when no segment is kept."""
        return self._segments[0].first_offset if self._segments else None

    @property
    def end_offset(self) -> int:
        """The offset the next segment starts at."""
        return self._segments[-1].end_offset if self._segments else self.floor

    @property
    def size_bytes(self) -> int:
        return sum(s.entry.size_bytes for s in self._segments)

    def add(self, segment: Segment) -> None:
        """Append a segment that starts exactly where the log ends."""
        if self._segments and segment.first_offset != self.end_offset:
            raise DataLoss(
                f"segment {segment.path.name} starts at {segment.first_offset}, "
                f"but the sealed log ends at {self.end_offset}"
            )
        if not self._segments:
            self.floor = min(self.floor, segment.first_offset)
        if segment.damage:
            self.damaged[segment.path] = segment.damage
        self._segments.append(segment)
        self._firsts.append(segment.first_offset)

    def replace(self, old: Sequence[Segment], new: Segment) -> None:
        """Put `new` where the consecutive segments `old` are; it covers exactly their range."""
        i = self._segments.index(old[0])
        if self._segments[i : i + len(old)] != list(old):
            raise DataLoss(f"segments to replace by {new.path.name} are not consecutive")
        if (new.first_offset, new.end_offset) != (old[0].first_offset, old[-1].end_offset):
            raise DataLoss(
                f"segment {new.path.name} does not cover the range of the segments it replaces"
            )
        self._segments[i : i + len(old)] = [new]
        self._firsts[i : i + len(old)] = [new.first_offset]
        for segment in old:
            self.damaged.pop(segment.path, None)

    def cut(self, next_offset: int, rewritten: Segment | None) -> list[Segment]:
        """Drop the segments ending after `next_offset` (a sealed truncation); `rewritten`,
        the one holding it cut to end there, takes its place. Returns those dropped."""
        i = bisect.bisect_right([s.end_offset for s in self._segments], next_offset)
        dropped = self._segments[i:]
        del self._segments[i:], self._firsts[i:]
        for segment in dropped:
            self.damaged.pop(segment.path, None)
        if rewritten is not None:
            self.add(rewritten)
        return dropped

    def remove_first(self) -> Segment:
        """Drop the oldest segment (retention) and raise the floor past it."""
        segment = self._segments.pop(0)
        self._firsts.pop(0)
        self.damaged.pop(segment.path, None)
        self.floor = segment.end_offset
        return segment

    def covering(self, offset: int) -> Segment | None:
        """The segment holding `offset`, if one is kept."""
        i = bisect.bisect_right(self._firsts, offset) - 1
        if i < 0 or offset >= self._segments[i].end_offset:
            return None
        return self._segments[i]

    async def read(self, from_offset: int, max_messages: int, max_bytes: int) -> list[StoredBatch]:
        """Batches of the first segment storing an offset at or after `from_offset`.

        Starts at the segment covering `from_offset`; a carried-forward segment
        may store nothing from there on, and then the next one is read. Empty
        when no segment stores anything at or after `from_offset`.
        """
        i = bisect.bisect_right(self._firsts, from_offset) - 1
        for segment in self._segments[max(i, 0) :]:
            if segment.end_offset <= from_offset or segment.entry.rows == 0:
                continue
            batches = await self._checked(
                segment,
                _read_batches,
                self.local_path,
                segment,
                self._verified,
                from_offset,
                max_messages,
                max_bytes,
                self._decoded_groups,
            )
            if batches:
                return batches
        return []

    async def offset_for_time(self, time_us: int) -> int | None:
        """The first sealed offset published at or after `time_us`, or None."""
        for segment in self._segments:
            if segment.entry.max_publish_time_us >= time_us:
                found = await self._checked(segment, self._first_at, segment, time_us)
                if found is not None:  # an emptied carried-forward segment stores none
                    return found
        return None

    def _first_at(self, segment: Segment, time_us: int) -> int | None:
        return segment_reads.first_offset_at_or_after(self.local_path(segment), time_us)

    async def _checked(self, segment: Segment, read: Callable[..., _T], *args: Any) -> _T:
        """`read(*args)` in a worker thread; damage it meets (or met before) is DATA_LOSS
        naming the file and the segment's range, and is remembered in `damaged`."""
        damage = self.damaged.get(segment.path)
        if damage is None:
            try:
                return await asyncio.to_thread(read, *args)
            except FileNotFoundError:
                raise  # sealing or retention removed it: the caller routes again
            except (OSError, ValueError, pa.ArrowException, DataLoss) as exc:
                damage = str(exc)
                log.error(
                    "segment damaged",
                    file=str(segment.path),
                    first_offset=segment.first_offset,
                    last_offset=segment.last_offset,
                    error=damage,
                )
                self.damaged[segment.path] = damage
        raise damaged_offsets_error(
            str(segment.path), segment.first_offset, segment.last_offset, damage
        )


def _read_batches(
    locate: Callable[[Segment], Path],
    segment: Segment,
    verified: VerifiedFiles,
    from_offset: int,
    max_messages: int,
    max_bytes: int,
    cache: DecodedGroups | None,
) -> list[StoredBatch]:
    """`read_rows` as stored batches, in one trip to a worker thread, after the file's
    digest is checked (the first time this process reads the file)."""
    path = locate(segment)
    problem = verified.check(path, segment.entry.digest)
    if problem is not None:
        raise DataLoss(problem)
    return segment_reads.to_stored_batches(
        segment_reads.read_rows(path, from_offset, max_messages, max_bytes, cache)
    )
