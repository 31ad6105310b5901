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
from dataclasses import dataclass, field


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
        if last < first or last < self.floor:
            return
        first = max(first, self.floor)
        merged: list[tuple[int, int]] = []
        placed = False
        for lo, hi in self.ranges:
            if hi + 1 < first:
                merged.append((lo, hi))
            elif last + 1 < lo:
                if not placed:
                    merged.append((first, last))
                    placed = True
                merged.append((lo, hi))
            else:
                first, last = min(first, lo), max(last, hi)
        if not placed:
            merged.append((first, last))
        merged.sort()
        if merged and merged[0][0] <= self.floor:
            self.floor = merged[0][1] + 1
            merged.pop(0)
        self.ranges = merged

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
