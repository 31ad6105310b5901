"""Moving a subscription's messages to its dead-letter stream.

Messages delivered `max_deliveries` times, or left unacked more than `max_lag`
behind the newest acked one, are moved (with their origin, delivery count and
reason in headers: `dead_letters.dead_letter_batch`) and acked; a term moves
the offsets its consumer names. A move that fails keeps the run and its
delivery count, and is tried again a second later.

`DeadLettering` is a part of `subscription.Subscription` (the state it works on
is the subscription's, declared here).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import structlog

from tamto_common.errors import TamtoError
from tamto_common.loop_slices import LoopSlices
from tamto_router.dead_letters import Origin, dead_letter_batch
from tamto_router.runs import Run, deliverable, lag_remainders, picked, unacked_runs

if TYPE_CHECKING:
    from tamto_router.acks import AckSet
    from tamto_router.dead_letters import Policy, Publish
    from tamto_router.model import Batch
    from tamto_router.partition_log import PartitionLog
    from tamto_router.slots import ConsumerSlot

log = structlog.get_logger(__name__)


class DeadLettering:
    """The dead-letter moves of one subscription (see the module's docstring)."""

    log: PartitionLog
    name: str
    acks: AckSet
    policy: Policy
    in_flight: list[Run]
    pending: list[Run]
    _publish_dead: Publish | None

    if TYPE_CHECKING:

        async def ack(
            self, ranges: list[tuple[int, int]], slot: ConsumerSlot | None = None
        ) -> None: ...

        async def read(self, first: int, want: int) -> list[Batch] | None: ...

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
        origin = Origin(self.log.stream, self.log.partition, self.name)
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
            partition=self.log.partition,
            subscription=self.name,
            offsets=f"{first}-{last}",
            reason=reason,
            delivery_count=count,
        )
        self.acks.dead_lettered += sum(b - a + 1 for a, b in moved)
        if moved and settle:
            await self.ack(moved)
        return moved
