"""Handing a subscription's messages out: reads from the log, hand-outs to consumers.

What every subscription type shares once its strategy picked a consumer
(`serve`), or picked the messages of a consumer itself (`hand`, key-shared):
reading stored batches (skipping what retention removed, settling what storage
does not hold), cutting them along the acks, handing each piece to its consumer
within its credit, and tracking it in flight until its ack deadline. Fresh data
comes from the subscription's position up to `fresh_end`; due redeliveries come
from its waiting runs (`pending`).

`Delivering` is a part of `subscription.Subscription` (the state it works on is
the subscription's, declared here); it never decides who gets what: that is the
strategy's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import structlog

from tamto_common.errors import OutOfRange, Unavailable
from tamto_common.loop_slices import LoopSlices
from tamto_router.metrics import count_out
from tamto_router.model import Batch, Delivery
from tamto_router.partition_log import drain_gate
from tamto_router.runs import Run, as_runs, deliverable, unacked_runs

if TYPE_CHECKING:
    from tamto_router.acks import AckSet
    from tamto_router.consumers import Consumers
    from tamto_router.cursor_commits import CursorCommits
    from tamto_router.partition_log import PartitionLog
    from tamto_router.slots import ConsumerSlot
    from tamto_router.strategies import Strategy

log = structlog.get_logger(__name__)


class Delivering:
    """Reads and hand-outs of one subscription (see the module's docstring)."""

    log: PartitionLog
    name: str
    acks: AckSet
    consumers: Consumers
    strategy: Strategy | None
    in_flight: list[Run]
    pending: list[Run]
    position: int
    read_max: int
    ack_timeout_s: float
    _cursor: CursorCommits
    _served: set[int]

    if TYPE_CHECKING:

        async def ack(
            self, ranges: list[tuple[int, int]], slot: ConsumerSlot | None = None
        ) -> None: ...

    async def serve(self, slot: ConsumerSlot, now: float) -> bool:
        """Send `slot` the most urgent runs: due redeliveries, first offsets first, as
        many as its credit covers, else fresh data from the log. False when there is
        neither (the strategy picked `slot`).

        The due runs are found and taken out of `pending` in one pass per call, not
        one per run: a nack of n disjoint ranges leaves n runs pending, and
        redelivering them one pass each cost O(n^2).
        """
        due = sorted((r for r in self.pending if r.due <= now), key=lambda r: r.first)
        if due:
            taken: list[Run] = []
            covered = 0
            for run in due:
                if taken and covered >= slot.credit.available:
                    break
                taken.append(run)
                covered += run.last - run.first + 1
            chosen = {id(run) for run in taken}
            self.pending = [r for r in self.pending if id(r) not in chosen]
            slices = LoopSlices()
            for i, run in enumerate(taken):
                if i and slot.credit.available <= 0:
                    self.pending.extend(taken[i:])  # back, for the next round
                    break
                await self._send_range(slot, run.first, run.last, run.count)
                await slices.pause()
            return True
        if self.position < self.fresh_end():
            await self._send_fresh(slot)
            return True
        return False

    def fresh_end(self) -> int:
        """The offset below which fresh messages may be delivered now: the durable end,
        or, when the strategy keeps order (`Strategy.drain_gated`: every type but
        shared), the start of the first ledger above the ack floor
        (`partition_log.drain_gate`): a new owner's messages wait until every message of
        the earlier ledgers was acked, so a key's order holds across a move."""
        end = self.log.durable_offset
        if self.strategy is not None and not self.strategy.drain_gated:
            return end
        gate = drain_gate(self.log.ledger_starts, self.acks.floor)
        return end if gate is None else min(end, gate)

    async def read(self, first: int, want: int) -> list[Batch] | None:
        """Stored batches from `first` on; None when `first` is below the partition's
        start, which storage moves by retention: the subscription then skips to the
        start storage holds now (docs/segments.md, "The readable range")."""
        try:
            if first < self.log.start_offset:  # a start storage announced
                raise OutOfRange(f"offset {first} is below the start {self.log.start_offset}")
            batches, _ = await self.log.read(first, want)  # another replica on DATA_LOSS
            await self._settle_holes(first, batches)
        except OutOfRange:
            start = await self.log.follow_start()
            log.warning(
                "retention removed messages before they were acked; skipping to the start",
                subscription=self.name,
                partition=f"{self.log.stream}/{self.log.partition}",
                offsets=f"{self.acks.floor}-{start - 1}",
            )
            self.position = max(self.position, start)
            if start > self.acks.floor:
                await self.ack([(self.acks.floor, start - 1)])
            return None
        return batches

    async def _settle_holes(self, first: int, batches: list[Batch]) -> None:
        """Settle the offsets from `first` on that a read stepped over: storage holds no
        message there (a range `tamto storage repair` recorded as lost, or messages
        interest retention removed), so no ack will ever come for them, and an ack
        floor left below them would hold the drain gate (`fresh_end`) shut for good."""
        holes, expected = list[tuple[int, int]](), first
        for batch in batches:
            last = min(batch.base_offset, self.log.durable_offset) - 1
            if last >= expected and self.acks.next_unacked(expected) <= last:
                holes.append((expected, last))
            expected = max(expected, batch.end)
        if holes:
            log.warning(
                "no messages stored at these offsets; settling them",
                subscription=self.name,
                partition=f"{self.log.stream}/{self.log.partition}",
                offsets=", ".join(f"{a}-{b}" for a, b in holes),
            )
            await self.ack(holes)

    def _budget(self, slot: ConsumerSlot) -> int | None:
        """How many messages `slot` may get now (`Strategy.budget`)."""
        return self.strategy.budget(slot) if self.strategy is not None else None

    async def _send_fresh(self, slot: ConsumerSlot) -> None:
        want = max(1, min(self.read_max, slot.credit.available))
        start, end = self.position, self.fresh_end()
        batches = await self.read(start, want)
        if batches is None:
            return  # below the partition's start: skipped to it
        if not any(batch.end > start for batch in batches):
            # Never spin: durable data below the log's end must be readable.
            raise Unavailable(
                f"storage returned nothing at offset {start} of {self.log.stream}/"
                f"{self.log.partition}, below its durable end {self.log.durable_offset}"
            )
        budget = self._budget(slot)
        for batch in batches:
            if batch.base_offset >= end:
                return  # past the drain gate (`fresh_end`)
            stopped = await self._hand_out(slot, batch, start, min(batch.end, end) - 1, 0, budget)
            if stopped is not None:
                self.position = max(self.position, stopped)
                return
            self.position = max(self.position, min(batch.end, end))
            if budget is not None:
                budget = slot.credit.available

    async def _send_range(self, slot: ConsumerSlot, first: int, last: int, count: int) -> None:
        want = last - first + 1
        batches = await self.read(first, want)
        if batches is None:  # below the partition's start: what is left waits its turn
            if last >= self.log.start_offset:
                self.pending.append(Run(self.log.start_offset, last, count, time.monotonic()))
            return
        budget = self._budget(slot)
        end = first
        for batch in batches:
            if batch.base_offset > last:
                break
            stopped = await self._hand_out(slot, batch, first, last, count, budget)
            if stopped is not None:
                self.pending.append(Run(stopped, last, count, time.monotonic()))
                return
            end = max(end, batch.end)
            if budget is not None:
                budget = slot.credit.available
        if first < end <= last:
            # One read returns a bounded number of bytes: the rest of the run waits its turn.
            self.pending.append(Run(end, last, count, time.monotonic()))

    async def _hand_out(
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
        out (the caller keeps the rest for later). Without a budget (a whole batch
        may overdraw the credit) a batch that acks cut into pieces is handed out
        only while the consumer has credit: acks of 10,000 disjoint ranges made one
        batch 10,000 deliveries at once. The loop is given back between pieces
        (`LoopSlices`).
        """
        now, slices, handed = time.monotonic(), LoopSlices(), False
        for first, length in unacked_runs(batch, lo, hi, self.acks):
            if slot not in self.consumers:  # it left: keep the messages for the next one
                self.pending.append(Run(first, first + length - 1, previous_count, now))
                continue
            if budget is not None:
                if budget <= 0:
                    return first
                length = min(length, budget)
                budget -= length
            elif handed and slot.credit.available <= 0:
                return first
            last = first + length - 1
            self.hand(slot, deliverable(batch, first, length), previous_count + 1, now)
            handed = True
            if budget is not None and last < min(batch.end - 1, hi):
                nxt = self.acks.next_unacked(last + 1)
                if nxt <= min(batch.end - 1, hi):
                    return nxt
            await slices.pause()
        return None

    def hand(
        self,
        slot: ConsumerSlot,
        piece: Batch,
        count: int,
        now: float,
        offsets: list[int] | None = None,
    ) -> None:
        """Deliver `piece` (its `count`th delivery) to `slot` and track it in flight
        until its ack deadline. `offsets`: each message's offset when `piece` holds
        messages picked out of a batch (key-shared), not one contiguous run."""
        sparse = None
        runs = [(piece.base_offset, piece.end - 1)]
        if offsets is not None and offsets[-1] - offsets[0] + 1 != len(offsets):
            sparse = tuple(offsets)
            runs = as_runs(offsets)
        slot.outbox.put_nowait(Delivery(self.log.partition, piece, count, sparse))
        slot.credit.take(piece.count)
        count_out(
            self.log.stream, piece.count, len(piece.arrow_ipc), piece.publish_time_us, count == 1
        )
        if count > 1:  # committed with the cursor, so the count outlives this router
            self.acks.redeliveries += piece.count
            self._cursor.changed()
        self._served.add(slot.id)
        deadline = now + self.ack_timeout_s
        for first, last in runs:
            self.in_flight.append(Run(first, last, count, deadline, slot.id))
