"""Subscription administration and stream stats on the partitions this router owns.

Operators ask how far behind a subscription is, move its cursor, skip what is
stuck, delete it, and look at a partition's size and messages without
subscribing. Every call works on one partition, which the router
claims if it does not own it yet (the gateway routes it to the owner).

A subscription's state lives in two places: its durable cursor in storage, and,
while it is loaded here (a consumer attached since the router took the
partition), the live `Subscription` with its in-flight runs and consumers.
Describe reads the live one when there is one, the stored cursor otherwise.

A seek behaves as Pulsar's reset-cursor: the live subscription is closed, its
consumers are disconnected (UNAVAILABLE: they reconnect and read on from the new
position), and the cursor is replaced in storage under the registry's lock for
that subscription, so no consumer loads it half-way. A skip only acknowledges
(the next N unacked messages; N beyond the backlog, "skip all", acks all of it): the
live subscription applies it and nobody is disconnected.
"""

from __future__ import annotations

import time
from dataclasses import replace

from tamto_common.errors import FailedPrecondition, InvalidArgument, NotFound, OutOfRange
from tamto_common.names import consumer_label
from tamto_router.acks import AckSet
from tamto_router.consume import SubscriptionRegistry
from tamto_router.cursors import commit_cursor, delete_cursor, get_cursor, list_cursors
from tamto_router.model import (
    Batch,
    ConsumerState,
    DiskUsage,
    PartitionState,
    Seek,
    SubscriptionState,
)
from tamto_router.partition_log import PartitionLog
from tamto_router.partitions import Partitions
from tamto_router.runs import deliverable
from tamto_router.subscription import Subscription

#: The window a partition's publish rate is measured over.
RATE_WINDOW_S = 60

#: Most messages one peek returns.
MAX_PEEK = 1000


def skip_ranges(acks: AckSet, start: int, end: int, count: int) -> list[tuple[int, int]]:
    """The inclusive ranges of the first `count` unacked offsets in [start, end)."""
    ranges: list[tuple[int, int]] = []
    for first, length in acks.unacked_runs(start, end):
        if count <= 0:
            break
        take = min(length, count)
        ranges.append((first, first + take - 1))
        count -= take
    return ranges


def backlog(acks: AckSet, start: int, end: int) -> int:
    """Offsets in [start, end) not acked."""
    return sum(length for _, length in acks.unacked_runs(start, end))


def in_flight(live: Subscription) -> dict[int, int]:
    """Messages delivered and not acked yet, per consumer (slot id).

    A run delivered in one piece stays in flight until its last message is acked;
    the messages of it acked already are not counted. One pass over the runs for
    every consumer: a pass per consumer cost a crowd of n consumers holding n
    runs O(n^2) on the event loop at every describe (and every metrics sample).
    """
    held: dict[int, int] = {}
    for r in live.in_flight:
        held[r.consumer] = held.get(r.consumer, 0) + backlog(live.acks, r.first, r.last + 1)
    return held


class SubscriptionAdmin:
    """List, describe, seek, skip and delete subscriptions; partition stats and peek."""

    def __init__(
        self, partitions: Partitions, registry: SubscriptionRegistry, instance: str
    ) -> None:
        self._partitions = partitions
        self._registry = registry
        self._instance = instance

    @staticmethod
    def _live(log: PartitionLog, name: str) -> Subscription | None:
        live = log.subscriptions.get(name)
        return live if isinstance(live, Subscription) and not live.closed else None

    async def names(self, stream: str, partition: int) -> list[str]:
        """The subscriptions with a cursor on the partition, sorted."""
        log = await self._partitions.get(stream, partition)
        return await list_cursors(log)

    async def describe(self, stream: str, partition: int, name: str) -> SubscriptionState:
        log = await self._partitions.get(stream, partition)
        return await self._describe(log, name, await _Stored.of(log))

    async def describe_all(self, stream: str, partition: int) -> dict[str, SubscriptionState]:
        """Every subscription of the partition described, asking storage for the
        partition's start and size once (the per-subscription metrics' sampling)."""
        log = await self._partitions.get(stream, partition)
        names = await list_cursors(log)
        stored = await _Stored.of(log)
        described = {name: await self._describe(log, name, stored) for name in names}
        return {name: state for name, state in described.items() if state.exists}

    async def _describe(self, log: PartitionLog, name: str, stored: _Stored) -> SubscriptionState:
        live = self._live(log, name)
        if live is not None:
            acks = live.acks
        else:
            cursor = await get_cursor(log, name)
            if cursor is None:
                return SubscriptionState(log.partition, exists=False)
            acks = cursor
        start, end = stored.start, log.durable_offset
        waiting = backlog(acks, max(acks.floor, start), end)
        state = SubscriptionState(
            log.partition,
            exists=True,
            start_offset=start,
            ack_floor=acks.floor,
            position=acks.floor if live is None else live.position,
            end_offset=end,
            backlog_messages=waiting,
            backlog_bytes=await stored.bytes_of(waiting),
            oldest_unacked_publish_time_us=await stored.publish_time(
                acks.next_unacked(max(acks.floor, start))
            ),
            redeliveries=acks.redeliveries,
            dead_lettered=acks.dead_lettered,
        )
        if live is None:
            return state
        held = in_flight(live)
        consumers = tuple(
            ConsumerState(
                slot.name,
                slot.credit.available,
                held.get(slot.id, 0),
                self._registry.addresses.get(slot.id, ""),
            )
            for slot in live.consumers
        )
        return replace(
            state,
            unacked=sum(held.values()),
            type=live.type.value if live.type is not None and consumers else None,
            consumers=consumers,
        )

    async def seek(
        self, stream: str, partition: int, name: str, seek: Seek, dry_run: bool = False
    ) -> SubscriptionState:
        """Move the cursor (see the module docstring); NotFound when there is none.

        A dry run validates and resolves the move and moves nothing: the state
        returned is today's, with `seek_to` the ack floor the seek would set.
        """
        log = await self._partitions.get(stream, partition)
        async with self._registry.lock(stream, partition, name):
            live = self._live(log, name)
            stored = live.acks if live is not None else None
            if stored is None:
                stored = await get_cursor(log, name)
            if stored is None:
                raise NotFound(f"subscription {name!r} has no cursor on {stream}/{partition}")
            if seek.kind == "skip":
                target = await self._skip(log, live, stored, name, seek.value, dry_run)
            else:
                target = await self._target(log, seek, stored.floor)
                if not dry_run:
                    if live is not None:
                        await live.close()
                        if log.subscriptions.get(name) is live:
                            del log.subscriptions[name]
                    await commit_cursor(log, name, AckSet(target), replace=True)
        state = await self.describe(stream, partition, name)
        return replace(state, seek_to=target) if dry_run else state

    async def _skip(
        self,
        log: PartitionLog,
        live: Subscription | None,
        acks: AckSet,
        name: str,
        count: int,
        dry_run: bool,
    ) -> int:
        """Acknowledge the next `count` unacked messages (none on a dry run); the ack
        floor they leave."""
        if count <= 0:
            raise InvalidArgument(f"skip needs a positive number of messages, got {count}")
        start = max(acks.floor, await log.follow_start())
        ranges = skip_ranges(acks, start, log.durable_offset, count)
        if dry_run or not ranges:
            after = AckSet(acks.floor, list(acks.ranges))
            for first, last in ranges:
                after.ack_range(first, last)
            return after.floor
        if live is not None:
            await live.ack(ranges)
            await live.flush_acks()
            return acks.floor
        acks.ack_ranges(ranges)
        await commit_cursor(log, name, acks)
        return acks.floor

    @staticmethod
    async def _target(log: PartitionLog, seek: Seek, floor: int) -> int:
        """The offset the cursor moves to; OutOfRange outside the stored range (a
        shift from the ack `floor` is clamped to it, as Kafka's shift-by is)."""
        if seek.kind == "latest":
            return log.durable_offset
        start = await log.follow_start()
        if seek.kind == "earliest":
            return start
        if seek.kind == "shift":
            return min(max(floor + seek.value, start), log.durable_offset)
        if seek.kind == "time":
            return await log.storage.offset_for_time(log.stream, log.partition, seek.value)
        end = log.durable_offset
        if not start <= seek.value <= end:
            raise OutOfRange(
                f"offset {seek.value} is outside {log.stream}/{log.partition}'s valid range "
                f"[{start}, {end}] (the oldest stored offset to the partition's end)"
            )
        return seek.value

    async def delete(self, stream: str, partition: int, name: str) -> bool:
        """Remove the subscription's cursor; FailedPrecondition while consumers are attached."""
        log = await self._partitions.get(stream, partition)
        async with self._registry.lock(stream, partition, name):
            live = self._live(log, name)
            if live is not None:
                if live.consumers:
                    raise FailedPrecondition(
                        f"subscription {name!r} on {stream}/{partition} has consumers "
                        f"attached ({', '.join(self._who(live))}): close them first"
                    )
                await live.close()
                if log.subscriptions.get(name) is live:
                    del log.subscriptions[name]
            return await delete_cursor(log, name)

    def _who(self, live: Subscription) -> list[str]:
        """The attached consumers by name (else the client's address)."""
        return [
            consumer_label(slot.name, self._registry.addresses.get(slot.id, ""))
            for slot in live.consumers
        ]

    async def stats(self, stream: str, partition: int) -> PartitionState:
        log = await self._partitions.get(stream, partition)
        usage = await log.storage.disk_usage(stream, partition)
        since_us = time.time_ns() // 1000 - RATE_WINDOW_S * 1_000_000
        recent_from = await log.storage.offset_for_time(stream, partition, since_us)
        end = max(log.durable_offset, usage.bounds.next_offset)
        return PartitionState(
            partition,
            usage.bounds.start_offset,
            end,
            usage.wal_bytes,
            usage.segment_bytes,
            max(0, end - recent_from) / RATE_WINDOW_S,
            self._instance,
        )

    async def read(self, stream: str, partition: int, offset: int, count: int) -> list[Batch]:
        """Stored batches holding [offset, offset + count) (the first may start before
        `offset`, the last end after); OutOfRange outside the stored range."""
        if not 1 <= count <= MAX_PEEK:
            raise InvalidArgument(f"count must be 1-{MAX_PEEK}, got {count}")
        log = await self._partitions.get(stream, partition)
        start = await log.follow_start()
        end = log.durable_offset
        if not start <= offset < end:
            raise OutOfRange(
                f"offset {offset} is outside {stream}/{partition}'s stored offsets "
                f"[{start}, {end - 1}]"
                if end > start
                else f"{stream}/{partition} holds no messages (next offset {end})"
            )
        found: list[Batch] = []
        at, last = offset, min(offset + count, end) - 1
        while at <= last:  # one read returns a bounded number of bytes
            batches, _ = await log.read(at, last - at + 1)  # another replica on DATA_LOSS
            got = [b for b in batches if b.end > at and b.base_offset <= last]
            if not got:
                break
            found.extend(got)
            at = got[-1].end
        return found

    async def peek(self, stream: str, partition: int, name: str, count: int) -> list[Batch]:
        """The next `count` messages the subscription has not acked, from its ack floor,
        cut to exactly them: what it would get next. Nothing is delivered or acked."""
        if not 1 <= count <= MAX_PEEK:
            raise InvalidArgument(f"count must be 1-{MAX_PEEK}, got {count}")
        log = await self._partitions.get(stream, partition)
        live = self._live(log, name)
        acks = live.acks if live is not None else await get_cursor(log, name)
        if acks is None:
            raise NotFound(f"subscription {name!r} has no cursor on {stream}/{partition}")
        start = max(acks.floor, await log.follow_start())
        found: list[Batch] = []
        for first, length in acks.unacked_runs(start, log.durable_offset):
            take = min(length, count - sum(b.count for b in found))
            if take <= 0:
                break
            for batch in await self.read(stream, partition, first, take):
                lo, hi = max(first, batch.base_offset), min(first + take, batch.end)
                if lo < hi:
                    found.append(deliverable(batch, lo, hi - lo))
        return found


class _Stored:
    """What storage holds of a partition, asked once for the subscriptions described
    together: its start, its average stored message size, publish times by offset."""

    def __init__(self, log: PartitionLog, start: int) -> None:
        self._log = log
        self.start = start
        self._usage: DiskUsage | None = None
        self._times: dict[int, int] = {}

    @classmethod
    async def of(cls, log: PartitionLog) -> _Stored:
        # Storage's start now, not the copy the bus keeps current: retention may have moved
        # it a moment ago, and a read below it would be refused (docs/segments.md).
        return cls(log, await log.follow_start())

    async def bytes_of(self, messages: int) -> int:
        """An estimate: `messages` times the partition's average stored message size."""
        if messages == 0:
            return 0
        if self._usage is None:
            self._usage = await self._log.storage.disk_usage(self._log.stream, self._log.partition)
        usage = self._usage
        stored = usage.bounds.next_offset - usage.bounds.start_offset
        if stored <= 0:
            return 0
        return (usage.wal_bytes + usage.segment_bytes) * messages // stored

    async def publish_time(self, offset: int) -> int:
        """The publish time of the message at `offset` (0 when it is not stored)."""
        if offset >= self._log.durable_offset:
            return 0
        if offset not in self._times:
            self._times[offset] = 0
            batches, _ = await self._log.read(offset, 1)  # another replica on DATA_LOSS
            for batch in batches:
                if batch.base_offset <= offset < batch.end:
                    self._times[offset] = batch.publish_time_us
        return self._times[offset]
