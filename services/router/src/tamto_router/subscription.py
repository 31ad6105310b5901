"""One subscription on one partition: who gets which message, and what comes back.

State is kept as offset ranges, never per message: the `AckSet` (acked ranges
above a floor), the runs delivered and not yet acked (`in_flight`, each with its
consumer, delivery count and ack deadline), and the runs waiting to be
delivered again (`pending`, with the time they become due). `position` is the
next offset never delivered.

One dispatcher task (owned here) hands out messages, always the most urgent
first: due redeliveries, then fresh data from the log. Which consumer gets them
depends on the type, one strategy each (`tamto_router.strategies`), picked when
a consumer attaches to a subscription that has none:

- exclusive: one consumer; attaching a second is refused.
- failover: consumers ordered by (name, arrival); only the first receives, and
  when it leaves, its unacked messages go to the next.
- shared: round-robin over consumers with credit; no ordering.
- key-shared: each key to one consumer, chosen on a consistent-hash ring of the
  consumers; a key that moves is held back until its old consumer acked it.
- multicast: every consumer, by name, gets every message with its own cursor.

An unacked run comes back after the stream's ack timeout, when its consumer
leaves, or at once (or after a delay) on nack; each redelivery counts one more
delivery. Acks are persisted as the subscription's cursor in storage, so after
a router restart only unacked messages are delivered again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from tamto_common.errors import (
    FailedPrecondition,
    InvalidArgument,
    OutOfRange,
    ResourceExhausted,
    TamtoError,
    Unavailable,
)
from tamto_common.loop_slices import LoopSlices
from tamto_protocol.limits import MAX_ACKED_RANGES
from tamto_router.acks import AckSet, TooManyRanges, normalized
from tamto_router.consumers import Consumers
from tamto_router.cursor_commits import CursorCommits
from tamto_router.cursors import commit_cursor
from tamto_router.dead_letters import Origin, Policy, Publish, dead_letter_batch
from tamto_router.metrics import count_out
from tamto_router.model import Batch, Delivery, SubscriptionType
from tamto_router.partition_log import PartitionLog, drain_gate
from tamto_router.runs import (
    Run,
    as_runs,
    cut,
    deliverable,
    lag_remainders,
    picked,
    unacked_runs,
)
from tamto_router.slots import ConsumerSlot, Credit
from tamto_router.strategies import Strategy, for_type

# Where the router's other modules (and tests) have always found them.
__all__ = [
    "MAX_TERM_REASON",
    "ConsumerSlot",
    "Credit",
    "Delivery",
    "Run",
    "Subscription",
    "SubscriptionType",
]

log = structlog.get_logger(__name__)

#: The longest reason a term may carry into its dead letters' header.
MAX_TERM_REASON = 1024


class Subscription:
    """One subscription on one partition; the type's decisions are its `strategy`'s.

    Its public surface: consumers `attach`/`detach`; their verbs `ack`, `nack`,
    `in_progress`, `term` and `flush_acks`; `poke` when credit or data changed;
    `close`; state to read (`acks`,
    `in_flight`, `pending`, `position`, `consumers`, `type`, `dead_lettered`,
    `closed`). `read`, `serve` and `hand` are what strategies use
    (`strategies.base.Host`).
    """

    def __init__(
        self,
        partition_log: PartitionLog,
        name: str,
        acks: AckSet,
        policy: Policy,
        read_max: int,
        publish_dead: Publish | None = None,
        commit_interval_s: float = 0.05,
        max_consumers: int = 0,
    ) -> None:
        self.log = partition_log
        self.name = name
        self.acks = acks
        self._cursor = CursorCommits(
            acks,
            self._commit_cursor,
            commit_interval_s,
            f"{partition_log.stream}/{partition_log.partition}/{name}",
        )
        self._cursor_closing: asyncio.Task[None] | None = None
        self.policy = policy
        self.ack_timeout_s = policy.ack_timeout_s
        #: The most messages one read asks storage for.
        self.read_max = read_max
        self._publish_dead = publish_dead
        #: The type's decisions; None until a consumer first attaches.
        self.strategy: Strategy | None = None
        self.consumers = Consumers(max_consumers, partition_log.stream)
        self._served: set[int] = set()  # slot ids ever handed a run (detach looks for theirs)
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

    @property
    def dead_lettered(self) -> int:
        """Messages moved to the dead-letter stream (kept with the cursor)."""
        return self.acks.dead_lettered

    @property
    def type(self) -> SubscriptionType | None:
        """The type of the consumers attached (or last attached); None before any."""
        return self.strategy.type if self.strategy is not None else None

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
        strategy = self.strategy
        if strategy is None or strategy.type is not kind:
            # No consumer is attached: the type is the newcomer's.
            strategy = for_type(kind)
        elif self.consumers:
            strategy.admit(self)
        # Key-shared: consistent hashing of keys onto consumers, so a consumer
        # joining or leaving moves only the keys on its arcs. O(log n): `Consumers`.
        self.consumers.add(
            slot,
            keyed=strategy.keyed,
            what=f"subscription {self.name!r} on {self.log.stream}/{self.partition}",
        )
        self.strategy = strategy
        self.poke()

    def detach(self, slot: ConsumerSlot, graceful: bool = False) -> None:
        """The consumer left: everything it had unacked is due for redelivery now.

        A consumer that closed its stream cleanly hands its messages back without
        using up a delivery (they were buffered, not failed); one that vanished
        (crashed, lost its connection) may have died on them, so they count.
        """
        if not self.consumers.remove(slot):
            return
        self.poke()
        if slot.id not in self._served:
            return  # never handed anything: no pass over the in-flight runs
        self._served.discard(slot.id)
        now = time.monotonic()
        mine: list[Run] = []
        kept: list[Run] = []
        for run in self.in_flight:
            (mine if run.consumer == slot.id else kept).append(run)
        self.in_flight = kept
        for run in mine:
            self._given_back(run.first, run.last)
            count = run.count - 1 if graceful else run.count
            self.pending.append(Run(run.first, run.last, count, now))
        self.poke()

    # -- acks and nacks ----------------------------------------------------

    def _check_ranges(self, ranges: list[tuple[int, int]], verb: str) -> None:
        for first, last in ranges:
            if first < 0 or first > last or last >= self.log.durable_offset:
                raise InvalidArgument(
                    f"cannot {verb} offsets {first}-{last} of {self.log.stream}/{self.partition}: "
                    f"the partition holds offsets below {self.log.durable_offset}"
                )

    async def ack(self, ranges: list[tuple[int, int]], slot: ConsumerSlot | None = None) -> None:
        """Apply acks at once; the cursor is committed behind them (`flush_acks`).

        The strategy says which part of an ack from `slot` applies
        (`Strategy.ackable`): on a shared or key-shared subscription only what no
        other consumer holds (a range ack, e.g. a cumulative one, cannot settle
        messages another consumer has not processed; that consumer acks them, or
        they come back when it leaves). Exclusive, failover and multicast
        subscriptions have one active consumer, so its acks, cumulative ones
        included, apply as sent.
        """
        self._check_ranges(ranges, "ack")
        ranges = normalized(ranges)
        if slot is not None and self.strategy is not None:
            ranges = self.strategy.ackable(ranges, slot.id, self.in_flight)
        try:
            self.acks.ack_ranges(ranges, MAX_ACKED_RANGES if slot is not None else None)
        except TooManyRanges as exc:
            raise ResourceExhausted(
                f"acks refused: subscription {self.name!r} on {self.log.stream}/{self.partition} "
                f"would hold {exc.ranges} acked ranges above its ack floor {self.acks.floor}, "
                f"more than the {MAX_ACKED_RANGES} it keeps; ack the offsets between them first"
            ) from None
        self._settled(ranges)
        self.in_flight = [r for r in self.in_flight if self.acks.next_unacked(r.first) <= r.last]
        self.pending = [r for r in self.pending if self.acks.next_unacked(r.first) <= r.last]
        self._cursor.changed()
        self.poke()

    async def flush_acks(self) -> None:
        """Return once every ack applied so far is committed to storage."""
        await self._cursor.flush()

    async def _commit_cursor(self, acks: AckSet) -> None:
        await commit_cursor(self.log, self.name, acks)

    def nack(
        self, ranges: list[tuple[int, int]], delay_s: float, slot: ConsumerSlot | None = None
    ) -> None:
        """Redeliver these in-flight offsets at once or after `delay_s`; a nack from
        `slot` touches only what is in flight to that consumer (never another's)."""
        self._check_ranges(ranges, "nack")
        due = time.monotonic() + delay_s
        for run in self._take_in_flight(ranges, slot):
            self._given_back(run.first, run.last)
            self.pending.append(Run(run.first, run.last, run.count, due))
        self.poke()

    def _take_in_flight(
        self, ranges: list[tuple[int, int]], slot: ConsumerSlot | None
    ) -> list[Run]:
        """Remove and return the parts of `ranges` in flight (to `slot`, if given).

        One pass over the runs in flight, each cut along the ranges it overlaps
        (found by bisection): O((r + k) log k) for r runs and k ranges, never a
        pass over the runs per range.
        """
        ranges = normalized(ranges)
        taken: list[Run] = []
        kept: list[Run] = []
        for run in self.in_flight:
            if slot is not None and run.consumer != slot.id:
                kept.append(run)
                continue
            pieces = cut(run, ranges)
            if pieces is None:
                kept.append(run)
                continue
            taken.extend(pieces[0])
            kept.extend(pieces[1])
        self.in_flight = kept
        return taken

    def in_progress(self, ranges: list[tuple[int, int]], slot: ConsumerSlot | None = None) -> None:
        """The consumer is still working on these in-flight offsets: their ack
        timeout starts again now (offsets not in flight to `slot` are left alone)."""
        self._check_ranges(ranges, "mark in progress")
        due = time.monotonic() + self.ack_timeout_s
        for run in self._take_in_flight(ranges, slot):
            run.due = due
            self.in_flight.append(run)
        self.poke()

    async def term(
        self, ranges: list[tuple[int, int]], reason: str, slot: ConsumerSlot | None = None
    ) -> None:
        """Never redeliver these in-flight offsets: dead-letter them now, with
        ``term`` and `reason` in their reason header, and ack them. Offsets not in
        flight to `slot` are left alone. If dead-lettering fails, or is cancelled
        because the session ended, the offsets not yet moved stay in flight (their
        ack timeout, or the consumer's leave, brings them back) and the error is
        raised; one moved twice is stored once (dead letters' ids)."""
        self._check_ranges(ranges, "term")
        if len(reason) > MAX_TERM_REASON:
            raise InvalidArgument(f"a term's reason is at most {MAX_TERM_REASON} characters")
        if self._publish_dead is None:
            raise FailedPrecondition(
                f"{self.log.stream}/{self.partition} has no dead-letter stream to term into"
            )
        why = f"term: {reason}" if reason else "term"
        taken = self._take_in_flight(ranges, slot)
        slices, moved, done = LoopSlices(), list[tuple[int, int]](), list[tuple[int, int]]()
        try:
            for i, run in enumerate(taken):
                try:
                    moved += await self._dead_letter(
                        run.first, run.last, run.count, why, settle=False
                    )
                except BaseException:  # failed or cancelled (its session ended): keep them
                    self.in_flight.extend(taken[i:])
                    raise
                done.append((run.first, run.last))
                await slices.pause()
        finally:  # one ack for all moved, not one (a pass over the runs) per run
            if moved:
                await self.ack(moved)
            self._settled(normalized(done))
        self.poke()

    # -- dispatch ----------------------------------------------------------

    def _given_back(self, first: int, last: int) -> None:
        if self.strategy is not None:
            self.strategy.given_back(first, last)

    def _settled(self, ranges: list[tuple[int, int]]) -> None:
        if self.strategy is not None:
            self.strategy.settled(ranges)

    def _expire(self, now: float) -> None:
        expired = [r for r in self.in_flight if r.due <= now]
        if expired:
            self.in_flight = [r for r in self.in_flight if r.due > now]
            for run in expired:
                self._given_back(run.first, run.last)
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
                if await self._dead_letter_what_is_over_limits(now):
                    continue
                if self.strategy is not None and await self.strategy.dispatch(self, now):
                    continue
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a
                # cancellation (close) that coincides with a poke, and close hangs.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._next_wakeup(now)):
                        await self._changed.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            error = exc if isinstance(exc, TamtoError) else Unavailable(f"delivery failed: {exc}")
            log.warning("subscription stopped", subscription=self.name, error=str(exc))
            self._fail(error)

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
        or, for every type but shared, the start of the first ledger above the ack floor
        (`partition_log.drain_gate`): a new owner's messages wait until every message of
        the earlier ledgers was acked, so a key's order holds across a move."""
        end = self.log.durable_offset
        if self.type is SubscriptionType.SHARED:
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
                partition=f"{self.log.stream}/{self.partition}",
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
                partition=f"{self.log.stream}/{self.partition}",
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
                f"{self.partition}, below its durable end {self.log.durable_offset}"
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
        slot.outbox.put_nowait(Delivery(self.partition, piece, count, sparse))
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

    async def _dead_letter_what_is_over_limits(self, now: float) -> bool:
        """Move runs over max_deliveries or max_lag to the dead-letter stream: all
        those found in one pass over the runs (not a pass per run moved), giving
        the event loop back between them (`LoopSlices`)."""
        if self._publish_dead is None:
            return False
        moves: list[tuple[Run, int, str]] = []
        limit = self.policy.max_deliveries
        if limit:
            over, self.pending = picked(self.pending, lambda r: r.count >= limit and r.due <= now)
            moves += [(run, run.last, "max_deliveries") for run in over]
        if not moves and self.policy.max_lag:
            # Lag is measured from the newest *acked* offset: consumers are moving
            # on past a message that stays unacked. (Measured from the newest
            # delivered one, a single large batch would put healthy in-flight
            # messages over the limit the moment it is sent.)
            newest_acked = self.acks.ranges[-1][1] if self.acks.ranges else self.acks.floor - 1
            threshold = newest_acked - self.policy.max_lag
            lagging, self.in_flight = picked(self.in_flight, lambda r: r.first < threshold)
            self.in_flight += lag_remainders(lagging, threshold)
            waiting, self.pending = picked(self.pending, lambda r: r.first < threshold)
            self.pending += lag_remainders(waiting, threshold)
            moves += [(r, min(r.last, threshold - 1), "max_lag") for r in lagging + waiting]
        slices, moved = LoopSlices(), list[tuple[int, int]]()
        try:
            for run, last, reason in moves:
                await self._dead_letter_or_retry(run, last, reason, self.pending, moved)
                await slices.pause()
        finally:  # one ack for all that moved: an ack passes over the runs once
            if moved:
                await self.ack(moved)
        return bool(moves)

    async def _dead_letter_or_retry(
        self,
        run: Run,
        last: int,
        reason: str,
        retry_in: list[Run],
        moved: list[tuple[int, int]],
    ) -> None:
        """Dead-letter [run.first, last], adding the ranges moved to `moved` (the
        caller acks them); if that fails, keep the run and try again later.

        A failure (the dead-letter partition is moving, storage is restarting)
        must not lose the run's delivery count, so the subscription lives on.
        """
        try:
            moved += await self._dead_letter(run.first, last, run.count, reason, settle=False)
        except TamtoError as exc:
            log.warning("dead-lettering failed; retrying", error=str(exc), offsets=run.first)
            retry_in.append(Run(run.first, last, run.count, time.monotonic() + 1.0))

    async def _dead_letter(
        self, first: int, last: int, count: int, reason: str, settle: bool = True
    ) -> list[tuple[int, int]]:
        """Move the unacked offsets of [first, last] to the dead-letter stream; the
        ranges moved, acked unless `settle` is False (the caller acks them)."""
        assert self._publish_dead is not None
        origin = Origin(self.log.stream, self.partition, self.name)
        batches: list[Batch] = []
        offset = first
        while offset <= last:  # one read returns a bounded number of bytes
            read = await self.read(offset, last - offset + 1)
            if read is None:  # retention removed the start of the range
                offset = max(offset, self.log.start_offset)
                continue
            got = [b for b in read if b.end > offset and b.base_offset <= last]
            if not got:
                break
            batches.extend(got)
            offset = got[-1].end
        moved: list[tuple[int, int]] = []
        for batch in batches:
            for start, length in unacked_runs(batch, first, last, self.acks):
                piece = deliverable(batch, start, length)
                data = dead_letter_batch(piece.arrow_ipc, start, origin, count, reason)
                await self._publish_dead(self.policy.dead_letter_stream, data, length)
                moved.append((start, start + length - 1))
        log.info(
            "dead-lettered",
            stream=self.log.stream,
            partition=self.partition,
            subscription=self.name,
            offsets=f"{first}-{last}",
            reason=reason,
            delivery_count=count,
        )
        self.acks.dead_lettered += sum(b - a + 1 for a, b in moved)
        if moved and settle:
            await self.ack(moved)
        return moved

    def _fail(self, error: TamtoError) -> None:
        self.closed = True
        self.log.listeners.discard(self.poke)
        # Commit what was acked (this may fail too: then the acks are redelivered).
        self._cursor_closing = asyncio.create_task(self._cursor.close())
        for slot in self.consumers:
            slot.outbox.put_nowait(error)

    async def close(self) -> None:
        self.closed = True
        self.log.listeners.discard(self.poke)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._cursor.close()
        for slot in self.consumers:
            slot.outbox.put_nowait(
                Unavailable(f"partition {self.log.stream}/{self.partition} moved")
            )
