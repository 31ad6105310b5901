"""Runs of offsets: how a subscription keeps what is in flight and what waits.

A subscription never keeps a record per message: delivered-and-unacked and
waiting-to-be-redelivered messages are inclusive offset runs with a delivery
count, a deadline and (in flight) the consumer holding them. The functions here
cut runs and batches along acked ranges and along each other.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tamto_protocol.batch import slice_batch
from tamto_router.acks import AckSet
from tamto_router.model import Batch


@dataclass(slots=True)
class Run:
    """Offsets [first, last] delivered `count` times; `due` is a deadline or not-before time."""

    first: int
    last: int
    count: int
    due: float
    consumer: int = 0


class WaitingRuns:
    """The runs a subscription keeps waiting to be delivered (again), and its position
    in the fresh messages: what of `strategies.base.Host` is about them."""

    pending: list[Run]
    position: int

    def waiting(self) -> Iterator[tuple[int, int]]:
        """The runs waiting to be delivered again (due or not), as (first, last)."""
        return ((r.first, r.last) for r in self.pending)

    def take_due(self, now: float) -> list[Run]:
        """Take the waiting runs due by `now` out of `pending`, by first offset: one
        pass over them, not a search of the list per run taken."""
        due = sorted((r for r in self.pending if r.due <= now), key=lambda r: r.first)
        if due:
            self.pending = [r for r in self.pending if r.due > now]
        return due

    def wait(self, run: Run) -> None:
        """Keep `run` waiting to be delivered (again) from `run.due` on."""
        self.pending.append(run)

    def advance(self, to: int) -> None:
        """Fresh messages below `to` were handed out or kept waiting: move the position."""
        self.position = max(self.position, to)


def unacked_runs(batch: Batch, lo: int, hi: int, acks: AckSet) -> list[tuple[int, int]]:
    """(first offset, length) runs of `batch` within [lo, hi] that are not acked."""
    return acks.unacked_runs(max(lo, batch.base_offset), min(batch.end, hi + 1))


def deliverable(batch: Batch, first: int, length: int) -> Batch:
    """The part of `batch` from `first`: as-is when whole, re-encoded when sliced."""
    if first == batch.base_offset and length == batch.count:
        return batch
    data = slice_batch(batch.arrow_ipc, first - batch.base_offset, length)
    return Batch(first, length, batch.publish_time_us, data)


def as_runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Ascending offsets as inclusive (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and offset == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def without(ranges: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of inclusive `ranges` outside the sorted, disjoint inclusive `holes`.

    Each range finds its first hole by bisection: O(k log h) for k ranges and h
    holes, plus one step per hole a range overlaps, never a pass over the holes
    per range.
    """
    left: list[tuple[int, int]] = []
    for first, last in ranges:
        i = bisect.bisect_left(holes, first, key=_last)  # the first hole ending at or after it
        while i < len(holes) and first <= last:
            lo, hi = holes[i]
            if lo > last:
                break
            if lo > first:
                left.append((first, lo - 1))
            first = hi + 1
            i += 1
        if first <= last:
            left.append((first, last))
    return left


def _last(r: tuple[int, int]) -> int:
    return r[1]


def minus(run: Run, first: int, last: int) -> list[Run]:
    """What is left of `run` outside [first, last]."""
    left = []
    if run.first < first:
        left.append(Run(run.first, min(run.last, first - 1), run.count, run.due, run.consumer))
    if run.last > last:
        left.append(Run(max(run.first, last + 1), run.last, run.count, run.due, run.consumer))
    return left


def cut(run: Run, ranges: list[tuple[int, int]]) -> tuple[list[Run], list[Run]] | None:
    """`run` cut along the sorted, disjoint inclusive `ranges`: (the parts inside
    them, the parts outside), or None when it overlaps none. O(log k) to find the
    first range it overlaps, then one step per range it overlaps."""
    i = bisect.bisect_left(ranges, run.first, key=_last)
    if i == len(ranges) or ranges[i][0] > run.last:
        return None
    inside: list[Run] = []
    outside: list[Run] = []
    first = run.first
    while i < len(ranges) and ranges[i][0] <= run.last:
        lo, hi = max(ranges[i][0], first), min(ranges[i][1], run.last)
        if lo > first:
            outside.append(Run(first, lo - 1, run.count, run.due, run.consumer))
        inside.append(Run(lo, hi, run.count, run.due, run.consumer))
        first = hi + 1
        i += 1
    if first <= run.last:
        outside.append(Run(first, run.last, run.count, run.due, run.consumer))
    return inside, outside


def picked(runs: list[Run], pick: Callable[[Run], bool]) -> tuple[list[Run], list[Run]]:
    """(the runs `pick` chooses, the others), in one pass."""
    chosen: list[Run] = []
    others: list[Run] = []
    for run in runs:
        (chosen if pick(run) else others).append(run)
    return chosen, others


def lag_remainders(lagging: list[Run], threshold: int) -> list[Run]:
    """What is left of runs that start below `threshold` from it on (a run over
    `max_lag` is dead-lettered only below the threshold)."""
    return [left for run in lagging for left in minus(run, run.first, min(run.last, threshold - 1))]
