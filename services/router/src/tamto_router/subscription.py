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

This module keeps the subscription's state, its consumers and their verbs and
the dispatcher; reading and handing messages out is `delivering.Delivering`'s,
moving them to the dead-letter stream `dead_lettering.DeadLettering`'s, both
parts of `Subscription`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from tamto_common.errors import (
    FailedPrecondition,
    InvalidArgument,
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
from tamto_router.dead_lettering import DeadLettering
from tamto_router.dead_letters import Policy, Publish
from tamto_router.delivering import Delivering
from tamto_router.model import Delivery, SubscriptionType
from tamto_router.partition_log import PartitionLog
from tamto_router.runs import Run, WaitingRuns, cut
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


class Subscription(Delivering, DeadLettering, WaitingRuns):
    """One subscription on one partition; the type's decisions are its `strategy`'s.

    Its public surface: consumers `attach`/`detach`; their verbs `ack`, `nack`,
    `in_progress`, `term` and `flush_acks`; `poke` when credit or data changed;
    `close`; state to read (`acks`,
    `in_flight`, `pending`, `position`, `consumers`, `type`, `dead_lettered`,
    `closed`). What strategies may use is `strategies.base.Host`: they read
    state and ask (`take_due`, `wait`, `advance`, `read`, `serve`, `hand`), never
    change it themselves.
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
        self._take_back_place(slot)
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

    def _take_back_place(self, slot: ConsumerSlot) -> None:
        """A consumer subscribing again (`slot.consumer_id` that of a session still
        attached) takes its own place: that session's stream ended without this router
        hearing of it yet (a network cut the router's side has not noticed, or the end
        of the session still on its way behind the new subscribe). Left there, it would
        hold what it had unacked and, on an exclusive or failover subscription, keep
        the consumer out. It is detached as a vanished consumer is, and ended."""
        if not slot.consumer_id:
            return
        for earlier in [s for s in self.consumers if s.consumer_id == slot.consumer_id]:
            self.detach(earlier)
            earlier.outbox.put_nowait(
                FailedPrecondition(
                    f"subscription {self.name!r} on {self.log.stream}/{self.partition}: "
                    "a newer session of this consumer took its place"
                )
            )

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

    # -- what strategies ask (strategies.base.Host; the waiting runs: WaitingRuns) --

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
