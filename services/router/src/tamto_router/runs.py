"""Runs of offsets: how a subscription keeps what is in flight and what waits.

A subscription never keeps a record per message: delivered-and-unacked and
waiting-to-be-redelivered messages are inclusive offset runs with a delivery
count, a deadline and (in flight) the consumer holding them. The functions here
cut runs and batches along acked ranges and along each other.
"""

from __future__ import annotations

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
    """The parts of inclusive `ranges` outside the sorted inclusive `holes`."""
    left: list[tuple[int, int]] = []
    for first, last in ranges:
        for lo, hi in holes:
            if hi < first:
                continue
            if lo > last:
                break
            if lo > first:
                left.append((first, lo - 1))
            first = hi + 1
            if first > last:
                break
        if first <= last:
            left.append((first, last))
    return left


def minus(run: Run, first: int, last: int) -> list[Run]:
    """What is left of `run` outside [first, last]."""
    left = []
    if run.first < first:
        left.append(Run(run.first, min(run.last, first - 1), run.count, run.due, run.consumer))
    if run.last > last:
        left.append(Run(max(run.first, last + 1), run.last, run.count, run.due, run.consumer))
    return left
