"""One subscription on one partition: who gets which message, and what comes back.

State is kept as offset ranges, never per message: the `AckSet` (acked ranges
above a floor), the runs delivered and not yet acked (`in_flight`, each with its
consumer, delivery count and ack deadline), and the runs waiting to be
delivered again (`pending`, with the time they become due). `position` is the
next offset never delivered.

One dispatcher task (owned here) hands out messages, always the most urgent
first: due redeliveries, then fresh data from the log. Which consumer gets them
depends on the type:

- exclusive: one consumer; attaching a second is refused.
- failover: consumers ordered by (name, arrival); only the first receives, and
  when it leaves, its unacked messages go to the next.
- shared: round-robin over consumers with credit; no ordering.

An unacked run comes back after the stream's ack timeout, when its consumer
leaves, or at once (or after a delay) on nack; each redelivery counts one more
delivery. Acks are persisted as the subscription's cursor in storage, so after
a router restart only unacked messages are delivered again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass, field
from enum import Enum

import structlog

from tamto_common.errors import FailedPrecondition, InvalidArgument, TamtoError, Unavailable
from tamto_router.acks import AckSet
from tamto_router.partition_log import PartitionLog
from tamto_router.storage_client import Batch

log = structlog.get_logger(__name__)


class SubscriptionType(Enum):
    EXCLUSIVE = "exclusive"
    FAILOVER = "failover"
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class Delivery:
    partition: int
    batch: Batch
    delivery_count: int


class Credit:
    """Messages a consumer will still take; a batch may overdraw it once."""

    def __init__(self) -> None:
        self.available = 0

    def grant(self, messages: int) -> None:
        self.available += messages

    def take(self, messages: int) -> None:
        self.available -= messages


_slot_ids = itertools.count(1)


@dataclass(eq=False)
class ConsumerSlot:
    """A consumer session as subscriptions see it: its credit and its outbox."""

    name: str
    credit: Credit = field(default_factory=Credit)
    outbox: asyncio.Queue[Delivery | BaseException] = field(default_factory=asyncio.Queue)
    id: int = field(default_factory=lambda: next(_slot_ids))


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
    runs: list[tuple[int, int]] = []
    end = min(batch.end, hi + 1)
    offset = acks.next_unacked(max(lo, batch.base_offset))
    while offset < end:
        stop = offset
        while stop < end and not acks.is_acked(stop):
            stop += 1
        runs.append((offset, stop - offset))
        offset = acks.next_unacked(stop)
    return runs


def deliverable(batch: Batch, first: int, length: int) -> Batch:
    """The part of `batch` from `first`: as-is when whole, re-encoded when sliced."""
    from tamto_protocol.batch import slice_batch

    if first == batch.base_offset and length == batch.count:
        return batch
    data = slice_batch(batch.arrow_ipc, first - batch.base_offset, length)
    return Batch(first, length, batch.publish_time_us, data)


def _minus(run: Run, first: int, last: int) -> list[Run]:
    """What is left of `run` outside [first, last]."""
    left = []
    if run.first < first:
        left.append(Run(run.first, min(run.last, first - 1), run.count, run.due, run.consumer))
    if run.last > last:
        left.append(Run(max(run.first, last + 1), run.last, run.count, run.due, run.consumer))
    return left


class Subscription:
    def __init__(
        self,
        partition_log: PartitionLog,
        name: str,
        acks: AckSet,
        ack_timeout_s: float,
        read_max: int,
    ) -> None:
        self.log = partition_log
        self.name = name
        self.acks = acks
        self.ack_timeout_s = ack_timeout_s
        self._read_max = read_max
        self.type: SubscriptionType | None = None
        self.consumers: list[tuple[str, int, ConsumerSlot]] = []  # (name, arrival, slot)
        self._arrivals = itertools.count()
        self._round_robin = 0
        self.in_flight: list[Run] = []
        self.pending: list[Run] = []
        self.position = acks.next_unacked(acks.floor)
        self._changed = asyncio.Event()
        self.closed = False
        partition_log.listeners.add(self.poke)
        self._task = asyncio.create_task(
            self._dispatch(),
            name=f"dispatch-{partition_log.stream}/{partition_log.partition}/{name}",
        )

    @property
    def partition(self) -> int:
        return self.log.partition

    def poke(self) -> None:
        """Something changed (credit, consumers, acks, data): let the dispatcher look again."""
        self._changed.set()

    # -- consumers ---------------------------------------------------------

    def attach(self, slot: ConsumerSlot, kind: SubscriptionType) -> None:
        if self.closed:
            raise Unavailable(f"subscription {self.name!r} is being reloaded; retry")
        if self.consumers and self.type is not kind:
            assert self.type is not None
            raise FailedPrecondition(
                f"subscription {self.name!r} on {self.log.stream}/{self.partition} is "
                f"{self.type.value}, not {kind.value}"
            )
        if self.consumers and kind is SubscriptionType.EXCLUSIVE:
            raise FailedPrecondition(
                f"subscription {self.name!r} on {self.log.stream}/{self.partition} already has "
                "a consumer (exclusive)"
            )
        self.type = kind
        self.consumers.append((slot.name, next(self._arrivals), slot))
        self.consumers.sort(key=lambda c: (c[0], c[1]))
        self.poke()

    def detach(self, slot: ConsumerSlot) -> None:
        """The consumer left: everything it had unacked is due for redelivery now."""
        self.consumers = [c for c in self.consumers if c[2] is not slot]
        now = time.monotonic()
        mine = [r for r in self.in_flight if r.consumer == slot.id]
        self.in_flight = [r for r in self.in_flight if r.consumer != slot.id]
        for run in mine:
            self.pending.append(Run(run.first, run.last, run.count, now))
        self.poke()

    # -- acks and nacks ----------------------------------------------------

    def _check_ranges(self, ranges: list[tuple[int, int]], verb: str) -> None:
        for first, last in ranges:
            if first < 0 or first > last or last >= self.log.durable_offset:
                raise InvalidArgument(
                    f"cannot {verb} offsets {first}-{last} of {self.log.stream}/{self.partition}: "
                    f"the partition holds offsets below {self.log.durable_offset}"
                )

    async def ack(self, ranges: list[tuple[int, int]]) -> None:
        self._check_ranges(ranges, "ack")
        for first, last in ranges:
            self.acks.ack_range(first, last)
        self.in_flight = [r for r in self.in_flight if self.acks.next_unacked(r.first) <= r.last]
        self.pending = [r for r in self.pending if self.acks.next_unacked(r.first) <= r.last]
        await self.log.storage.commit_cursor(
            self.log.stream, self.partition, self.name, self.log.epoch, self.acks
        )
        self.poke()

    def nack(self, ranges: list[tuple[int, int]], delay_s: float) -> None:
        """Redeliver these in-flight offsets at once or after `delay_s`."""
        self._check_ranges(ranges, "nack")
        due = time.monotonic() + delay_s
        for first, last in ranges:
            kept: list[Run] = []
            for run in self.in_flight:
                if run.last < first or run.first > last:
                    kept.append(run)
                    continue
                lo, hi = max(run.first, first), min(run.last, last)
                self.pending.append(Run(lo, hi, run.count, due))
                kept.extend(_minus(run, first, last))
            self.in_flight = kept
        self.poke()

    # -- dispatch ----------------------------------------------------------

    def _next_consumer(self) -> ConsumerSlot | None:
        if not self.consumers:
            return None
        if self.type is SubscriptionType.SHARED:
            for i in range(len(self.consumers)):
                slot = self.consumers[(self._round_robin + i) % len(self.consumers)][2]
                if slot.credit.available > 0:
                    self._round_robin = (self._round_robin + i + 1) % len(self.consumers)
                    return slot
            return None
        active = self.consumers[0][2]
        return active if active.credit.available > 0 else None

    def _expire(self, now: float) -> None:
        expired = [r for r in self.in_flight if r.due <= now]
        if expired:
            self.in_flight = [r for r in self.in_flight if r.due > now]
            for run in expired:
                self.pending.append(Run(run.first, run.last, run.count, now))

    def _next_wakeup(self, now: float) -> float | None:
        times = [r.due for r in self.in_flight] + [r.due for r in self.pending if r.due > now]
        return max(0.0, min(times) - now) if times else None

    async def _dispatch(self) -> None:
        try:
            while True:
                self._changed.clear()
                if self.log.failure is not None:
                    raise self.log.failure
                now = time.monotonic()
                self._expire(now)
                slot = self._next_consumer()
                if slot is not None:
                    due = sorted((r for r in self.pending if r.due <= now), key=lambda r: r.first)
                    if due:
                        self.pending.remove(due[0])
                        await self._send_range(slot, due[0].first, due[0].last, due[0].count)
                        continue
                    if self.position < self.log.durable_offset:
                        await self._send_fresh(slot)
                        continue
                timeout = self._next_wakeup(now)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            error = exc if isinstance(exc, TamtoError) else Unavailable(f"delivery failed: {exc}")
            log.warning("subscription stopped", subscription=self.name, error=str(exc))
            self._fail(error)

    def _budget(self, slot: ConsumerSlot) -> int | None:
        """How many messages `slot` may get now: exact credit for shared subscriptions
        (load balancing needs it), otherwise unbounded (a whole batch may overdraw)."""
        return slot.credit.available if self.type is SubscriptionType.SHARED else None

    async def _send_fresh(self, slot: ConsumerSlot) -> None:
        want = max(1, min(self._read_max, slot.credit.available))
        start = self.position
        batches, _ = await self.log.storage.read(self.log.stream, self.partition, start, want)
        budget = self._budget(slot)
        for batch in batches:
            stopped = self._hand_out(slot, batch, start, batch.end - 1, 0, budget)
            if stopped is not None:
                self.position = max(self.position, stopped)
                return
            self.position = max(self.position, batch.end)
            if budget is not None:
                budget = slot.credit.available

    async def _send_range(self, slot: ConsumerSlot, first: int, last: int, count: int) -> None:
        want = last - first + 1
        batches, _ = await self.log.storage.read(self.log.stream, self.partition, first, want)
        budget = self._budget(slot)
        for batch in batches:
            if batch.base_offset > last:
                break
            stopped = self._hand_out(slot, batch, first, last, count, budget)
            if stopped is not None:
                self.pending.append(Run(stopped, last, count, time.monotonic()))
                return
            if budget is not None:
                budget = slot.credit.available

    def _hand_out(
        self,
        slot: ConsumerSlot,
        batch: Batch,
        lo: int,
        hi: int,
        previous_count: int,
        budget: int | None,
    ) -> int | None:
        """Deliver the unacked part of `batch` within [lo, hi] to `slot`.

        Returns None when all of it was handled, or the offset where the budget ran
        out (the caller keeps the rest for later).
        """
        attached = any(c[2] is slot for c in self.consumers)
        now = time.monotonic()
        for first, length in unacked_runs(batch, lo, hi, self.acks):
            if not attached:  # it left while we read: keep the messages for the next one
                self.pending.append(Run(first, first + length - 1, previous_count, now))
                continue
            if budget is not None:
                if budget <= 0:
                    return first
                length = min(length, budget)
                budget -= length
            last = first + length - 1
            count = previous_count + 1
            piece = deliverable(batch, first, length)
            slot.outbox.put_nowait(Delivery(self.partition, piece, count))
            slot.credit.take(length)
            self.in_flight.append(Run(first, last, count, now + self.ack_timeout_s, slot.id))
            if budget is not None and last < min(batch.end - 1, hi):
                nxt = self.acks.next_unacked(last + 1)
                if nxt <= min(batch.end - 1, hi):
                    return nxt
        return None

    def _fail(self, error: TamtoError) -> None:
        self.closed = True
        self.log.listeners.discard(self.poke)
        for _, _, slot in self.consumers:
            slot.outbox.put_nowait(error)

    async def close(self) -> None:
        self.closed = True
        self.log.listeners.discard(self.poke)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        for _, _, slot in self.consumers:
            slot.outbox.put_nowait(
                Unavailable(f"partition {self.log.stream}/{self.partition} moved")
            )
