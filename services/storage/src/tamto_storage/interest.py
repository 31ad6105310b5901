"""Interest retention: which offsets of a partition some subscription still needs.

Every durable subscription on a partition has a cursor (`tamto_storage.cursors`):
all offsets below its ``ack_floor`` are acked, plus inclusive ranges above it.
An offset is still *needed* while any cursor has not acked it, so the offsets
retention may remove are the intersection of the cursors' acked sets
(`AckedByAll`). With no cursor at all nothing counts as acked: a partition
nobody has subscribed to yet keeps everything (see docs/segments.md).

`plan_reclaim` turns that into work on the sealed segments: leading segments
nothing needs are dropped whole; runs of segments that are mostly acked are
rewritten as one segment holding only the needed messages ("carried forward").
Pure functions over numbers: the sealer does the I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tamto_storage.model import Cursor
from tamto_storage.segments import Segment

#: A half-open offset range [start, end).
Span = tuple[int, int]


def cursor_spans(cursor: Cursor) -> list[Span]:
    """The offsets `cursor` has acked, as sorted disjoint half-open spans."""
    spans: list[Span] = [(0, cursor.ack_floor)] if cursor.ack_floor > 0 else []
    for r in cursor.acked_above_floor:
        if spans and r.first <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], r.last + 1))
        else:
            spans.append((r.first, r.last + 1))
    return spans


def intersect(a: Sequence[Span], b: Sequence[Span]) -> list[Span]:
    """The offsets in both span lists (each sorted and disjoint)."""
    out: list[Span] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


@dataclass(frozen=True, slots=True)
class AckedByAll:
    """The offsets of one partition that every subscription has acked."""

    spans: tuple[Span, ...]

    @classmethod
    def of(cls, cursors: Iterable[Cursor]) -> AckedByAll | None:
        """The intersection of `cursors`' acks; None when there is no cursor."""
        common: list[Span] | None = None
        for cursor in cursors:
            spans = cursor_spans(cursor)
            common = spans if common is None else intersect(common, spans)
        return None if common is None else cls(tuple(common))

    def needed(self, start: int, end: int) -> list[Span]:
        """The offsets in [start, end) that some subscription has not acked."""
        out: list[Span] = []
        position = start
        # The spans are sorted and disjoint: begin at the last one starting at or before `start`.
        i = max(bisect.bisect_right(self.spans, (start, start)) - 1, 0)
        for lo, hi in self.spans[i:]:
            if hi <= position:
                continue
            if lo >= end:
                break
            if lo > position:
                out.append((position, lo))
            position = max(position, hi)
        if position < end:
            out.append((position, end))
        return out

    def without(self, offset: int) -> AckedByAll:
        """The same, with `offset` counted as needed (see `Reclaimer`: the newest is kept)."""
        spans: list[Span] = []
        for lo, hi in self.spans:
            if lo <= offset < hi:
                spans += [s for s in ((lo, offset), (offset + 1, hi)) if s[0] < s[1]]
            else:
                spans.append((lo, hi))
        return AckedByAll(tuple(spans))


def count_in(spans: Sequence[Span], offsets: npt.NDArray[np.int64]) -> int:
    """How many of the sorted `offsets` fall in `spans`."""
    if not spans or not len(offsets):
        return 0
    starts = np.searchsorted(offsets, [s for s, _ in spans], side="left")
    ends = np.searchsorted(offsets, [e for _, e in spans], side="left")
    return int((ends - starts).sum())


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Replace `members` (consecutive segments) by one covering the same range,
    holding only their rows in `keep`."""

    members: tuple[Segment, ...]
    keep: tuple[Span, ...]

    @property
    def first_offset(self) -> int:
        return self.members[0].first_offset

    @property
    def last_offset(self) -> int:
        return self.members[-1].last_offset


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """What interest retention does to one partition's sealed segments."""

    drop: tuple[Segment, ...] = ()  # leading segments nothing needs: removed whole
    rewrites: tuple[Rewrite, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.drop or self.rewrites)


@dataclass(frozen=True, slots=True)
class ReclaimLimits:
    """When rewriting is worth it.

    A segment is *reclaimable* when at least `min_reclaim_share` of its rows may
    go. Consecutive reclaimable segments form a run that is rewritten as one
    segment; a small carried-forward segment (at most `small_bytes`) joins a
    neighbouring run, so the few messages left over from many old segments end
    up in one small file rather than one file each. A run is rewritten only
    when it frees at least as many bytes as it rewrites, so the bytes rewritten
    over time never exceed the bytes freed; and it stops growing once the rows
    it keeps would pass `max_run_bytes`. A sealed segment that is mostly still
    needed is never rewritten.
    """

    small_bytes: int
    max_run_bytes: int
    min_reclaim_share: float = 0.5


def plan_reclaim(
    segments: Sequence[Segment],
    needed_rows: Sequence[int],
    acked: AckedByAll,
    limits: ReclaimLimits,
) -> ReclaimPlan:
    """Plan interest retention for a partition's `segments` (in offset order).

    `needed_rows[i]` is how many rows of `segments[i]` some subscription still
    needs. Rewriting only ever drops rows, so doing a plan twice is harmless.
    """
    i = 0
    while i < len(segments) and needed_rows[i] == 0:
        i += 1
    drop = tuple(segments[:i])

    def reclaimable(j: int) -> bool:
        rows = segments[j].entry.rows
        return needed_rows[j] < rows and rows - needed_rows[j] >= limits.min_reclaim_share * rows

    def joins(j: int) -> bool:
        entry = segments[j].entry
        return reclaimable(j) or (entry.generation > 0 and entry.size_bytes <= limits.small_bytes)

    def kept_bytes(j: int) -> float:
        entry = segments[j].entry
        return entry.size_bytes * needed_rows[j] / entry.rows if entry.rows else 0.0

    rewrites: list[Rewrite] = []
    run: list[int] = []

    def close_run() -> None:
        kept = sum(kept_bytes(j) for j in run)
        freed = sum(segments[j].entry.size_bytes for j in run) - kept
        if any(reclaimable(j) for j in run) and freed >= kept:
            members = tuple(segments[j] for j in run)
            keep = acked.needed(members[0].first_offset, members[-1].end_offset)
            rewrites.append(Rewrite(members, tuple(keep)))

    for j in range(i, len(segments)):
        if not joins(j):
            close_run()
            run = []
        elif run and sum(kept_bytes(k) for k in run) + kept_bytes(j) > limits.max_run_bytes:
            close_run()
            run = [j]
        else:
            run.append(j)
    close_run()
    return ReclaimPlan(drop, tuple(rewrites))
