"""Consume sessions: deliver a subscription's unacked messages within credit.

A session covers some partitions of one stream for one subscription. Each
partition has a delivery task (owned by the session) that reads durable data
from storage from the first unacked offset, skips acked ranges, and hands
batches to the session's queue while the consumer has credit. Acks update the
partition's `AckSet` and are persisted as the subscription's cursor, so a new
session (after a disconnect or a router crash) starts at the first unacked
message and skips everything acked since.

Subscriptions are exclusive for now: a second session on the same partition
and subscription is refused while the first is open.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from tamto_common.errors import FailedPrecondition, InvalidArgument
from tamto_protocol.batch import slice_batch
from tamto_router.acks import AckSet
from tamto_router.partitions import Partitions
from tamto_router.storage_client import Batch

StartKind = Literal["earliest", "latest", "offset"]


@dataclass(frozen=True)
class Start:
    kind: StartKind
    offset: int = 0


@dataclass(frozen=True)
class SubscribeSpec:
    stream: str
    subscription: str
    start: Start
    partitions: tuple[int, ...]


class Credit:
    """Messages the consumer will still take; a batch may overdraw it once."""

    def __init__(self) -> None:
        self.available = 0
        self._changed = asyncio.Event()

    def grant(self, messages: int) -> None:
        self.available += messages
        self._changed.set()

    def take(self, messages: int) -> None:
        self.available -= messages

    async def wait_positive(self) -> None:
        while self.available <= 0:
            self._changed.clear()
            await self._changed.wait()


def unacked_runs(batch: Batch, position: int, acks: AckSet) -> list[tuple[int, int]]:
    """(first offset, length) runs of `batch` at or after `position` that are not acked."""
    runs: list[tuple[int, int]] = []
    offset = acks.next_unacked(max(position, batch.base_offset))
    while offset < batch.end:
        stop = offset
        while stop < batch.end and not acks.is_acked(stop):
            stop += 1
        runs.append((offset, stop - offset))
        offset = acks.next_unacked(stop)
    return runs


def deliverable(batch: Batch, first: int, length: int) -> Batch:
    """The part of `batch` from `first`, as-is when whole, re-encoded when sliced."""
    if first == batch.base_offset and length == batch.count:
        return batch
    data = slice_batch(batch.arrow_ipc, first - batch.base_offset, length)
    return Batch(first, length, batch.publish_time_us, data)


class ActiveSessions:
    """Which (stream, partition, subscription) has an open session."""

    def __init__(self) -> None:
        self._held: set[tuple[str, int, str]] = set()

    def acquire(self, spec: SubscribeSpec) -> None:
        keys = [(spec.stream, p, spec.subscription) for p in spec.partitions]
        busy = [k for k in keys if k in self._held]
        if busy:
            raise FailedPrecondition(
                f"subscription {spec.subscription!r} on {spec.stream}/{busy[0][1]} already has "
                "a consumer (exclusive)"
            )
        self._held.update(keys)

    def release(self, spec: SubscribeSpec) -> None:
        self._held.difference_update((spec.stream, p, spec.subscription) for p in spec.partitions)


class ConsumeSession:
    def __init__(
        self, spec: SubscribeSpec, partitions: Partitions, active: ActiveSessions, read_max: int
    ) -> None:
        self.spec = spec
        self._partitions = partitions
        self._active = active
        self._read_max = read_max
        self.credit = Credit()
        self._acks: dict[int, AckSet] = {}
        self._queue: asyncio.Queue[tuple[int, Batch] | BaseException] = asyncio.Queue(maxsize=4)
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> ConsumeSession:
        self._active.acquire(self.spec)
        try:
            for p in self.spec.partitions:
                self._acks[p] = await self._load_cursor(p)
        except BaseException:
            self._active.release(self.spec)
            raise
        self._tasks = [
            asyncio.create_task(self._deliver(p), name=f"deliver-{self.spec.stream}/{p}")
            for p in self.spec.partitions
        ]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._active.release(self.spec)

    async def _load_cursor(self, partition: int) -> AckSet:
        log = await self._partitions.get(self.spec.stream, partition)
        stored = await log.storage.get_cursor(self.spec.stream, partition, self.spec.subscription)
        if stored is not None:
            return stored
        start = self.spec.start
        if start.kind == "earliest":
            floor = log.start_offset
        elif start.kind == "latest":
            floor = log.durable_offset
        else:
            if not log.start_offset <= start.offset <= log.durable_offset:
                raise InvalidArgument(
                    f"start offset {start.offset} is outside {self.spec.stream}/{partition}'s "
                    f"stored range [{log.start_offset}, {log.durable_offset}]"
                )
            floor = start.offset
        acks = AckSet(floor)
        # Fix the start now, so "latest" means the moment the subscription was created.
        await log.storage.commit_cursor(
            self.spec.stream, partition, self.spec.subscription, log.epoch, acks
        )
        return acks

    async def _deliver(self, partition: int) -> None:
        try:
            acks = self._acks[partition]
            position = acks.next_unacked(acks.floor)
            while True:
                await self.credit.wait_positive()
                log = await self._partitions.get(self.spec.stream, partition)
                await log.wait_beyond(position)
                if log.failure is not None:
                    continue  # the next get() reopens the partition
                want = max(1, min(self._read_max, self.credit.available))
                batches, _ = await log.storage.read(self.spec.stream, partition, position, want)
                for batch in batches:
                    for first, length in unacked_runs(batch, position, acks):
                        await self._queue.put((partition, deliverable(batch, first, length)))
                        self.credit.take(length)
                    position = max(position, batch.end)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await self._queue.put(exc)

    async def deliveries(self) -> AsyncIterator[tuple[int, Batch]]:
        while True:
            item = await self._queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item

    async def ack(self, partition: int, ranges: list[tuple[int, int]]) -> None:
        acks = self._acks.get(partition)
        if acks is None:
            raise InvalidArgument(f"partition {partition} is not part of this session")
        log = await self._partitions.get(self.spec.stream, partition)
        for first, last in ranges:
            if first > last or first < 0 or last >= log.durable_offset:
                raise InvalidArgument(
                    f"cannot ack offsets {first}-{last} of {self.spec.stream}/{partition}: "
                    f"the partition holds offsets below {log.durable_offset}"
                )
        for first, last in ranges:
            acks.ack_range(first, last)
        await log.storage.commit_cursor(
            self.spec.stream, partition, self.spec.subscription, log.epoch, acks
        )
