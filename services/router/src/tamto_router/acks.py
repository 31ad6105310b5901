"""Ack bookkeeping for one subscription on one partition, kept as ranges.

Every offset below `floor` is acked. Above it, acked offsets are a sorted list
of disjoint inclusive ranges; an ack that closes the gap at the floor advances
the floor and drops the ranges it swallowed. State for fully acked data is
therefore dropped, and one unacked message costs one gap, not a list of offsets.

The subscription's redelivery and dead-letter counts ride along: they are
committed with the cursor, so they outlive the router that counted them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from tamto_protocol.offset_ranges import merge_ranges


class TooManyRanges(Exception):
    """Acks refused: they would leave more acked ranges above the floor than allowed."""

    def __init__(self, ranges: int) -> None:
        super().__init__(f"{ranges} acked ranges")
        self.ranges = ranges


@dataclass
class AckSet:
    floor: int
    ranges: list[tuple[int, int]] = field(default_factory=list)
    #: Messages delivered more than once, and moved to the dead-letter stream.
    redeliveries: int = 0
    dead_lettered: int = 0

    def copy(self) -> AckSet:
        """An independent copy (what a commit sends while acks go on changing this one)."""
        return AckSet(self.floor, list(self.ranges), self.redeliveries, self.dead_lettered)

    def is_acked(self, offset: int) -> bool:
        if offset < self.floor:
            return True
        i = bisect.bisect_right(self.ranges, (offset, float("inf"))) - 1
        return i >= 0 and self.ranges[i][0] <= offset <= self.ranges[i][1]

    def ack_range(self, first: int, last: int) -> None:
        """Mark [first, last] acked (idempotent)."""
        self.ack_ranges([(first, last)])

    def ack_ranges(self, ranges: Iterable[tuple[int, int]], max_ranges: int | None = None) -> None:
        """Mark every inclusive range of `ranges` acked (idempotent, any order).

        With `max_ranges`, acks that would leave more ranges than that above the
        floor, and more than before, are refused whole (`TooManyRanges`): nothing
        changes. Acks that close gaps are always taken.

        One request's k ranges cost O(k log k) to sort and O(log R) each to place
        among the R ranges held, plus one copy of the held list (a C-level copy of
        R references, not a Python step per range): never a pass over the held
        ranges per range acked, which made k disjoint acks cost O(k * R).
        """
        incoming = normalized((max(f, self.floor), t) for f, t in ranges if t >= max(f, self.floor))
        if not incoming:
            return
        held, out, start = self.ranges, list[tuple[int, int]](), 0
        for first, last in incoming:
            # Held ranges ending before `first` without touching it stay as they are.
            i = bisect.bisect_left(held, first - 1, lo=start, key=_last)
            out.extend(held[start:i])
            # Held ranges starting at or before `last + 1` merge into this one.
            j = bisect.bisect_right(held, last + 1, lo=i, key=_first)
            if j > i:
                first, last = min(first, held[i][0]), max(last, held[j - 1][1])
            if out and out[-1][1] + 1 >= first:
                first, last = min(first, out[-1][0]), max(last, out.pop()[1])
            out.append((first, last))
            start = j
        out.extend(held[start:])
        if out[0][0] <= self.floor:
            self.floor = out[0][1] + 1
            del out[0]
        if max_ranges is not None and len(out) > max(max_ranges, len(held)):
            raise TooManyRanges(len(out))
        self.ranges = out

    def ack_through(self, offset: int) -> None:
        """Cumulative ack: everything up to and including `offset`."""
        self.ack_range(self.floor, offset)

    def next_unacked(self, offset: int) -> int:
        """The first offset >= `offset` that is not acked."""
        offset = max(offset, self.floor)
        while True:  # ranges loaded from storage may touch: then hop along them
            i = bisect.bisect_right(self.ranges, (offset, float("inf"))) - 1
            if i < 0 or not self.ranges[i][0] <= offset <= self.ranges[i][1]:
                return offset
            offset = self.ranges[i][1] + 1

    def next_acked(self, offset: int) -> int | None:
        """The first offset >= `offset` that is acked (None: there is none)."""
        if offset < self.floor:
            return offset
        i = bisect.bisect_right(self.ranges, (offset, float("inf"))) - 1
        if i >= 0 and self.ranges[i][0] <= offset <= self.ranges[i][1]:
            return offset
        return self.ranges[i + 1][0] if i + 1 < len(self.ranges) else None

    def unacked_runs(self, first: int, end: int) -> list[tuple[int, int]]:
        """(first offset, length) of the runs in [first, end) that are not acked.

        Costs one step per gap, never one per offset.
        """
        runs: list[tuple[int, int]] = []
        offset = self.next_unacked(first)
        while offset < end:
            acked = self.next_acked(offset)
            stop = end if acked is None else min(acked, end)
            runs.append((offset, stop - offset))
            offset = self.next_unacked(stop)
        return runs


def most_advanced(cursors: Iterable[AckSet]) -> AckSet | None:
    """The cursor furthest on: the highest ack floor, then the most acked above it."""

    def progress(acks: AckSet) -> tuple[int, int]:
        return acks.floor, sum(last - first + 1 for first, last in acks.ranges)

    return max(cursors, key=progress, default=None)


def normalized(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive `ranges` sorted, with overlapping and touching ones merged
    (reversed ones dropped): O(k log k) for k ranges."""
    return merge_ranges(r for r in ranges if r[0] <= r[1])


def _first(r: tuple[int, int]) -> int:
    return r[0]


def _last(r: tuple[int, int]) -> int:
    return r[1]
