"""Key-shared subscriptions: each key to one consumer, in order per key.

Consumers sit on a consistent-hash ring (`Consumers.owner`), so one joining or
leaving moves only the keys on its arcs. A key that moved is held back until
its old consumer acked (or gave back) what it had of it, and a message waits
while an earlier one of its key waits: `KeyHolds` keeps both rules. Deliveries
are sparse: a batch's messages go to the consumers their keys hash to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tamto_common.loop_slices import LoopSlices
from tamto_protocol.batch import decode_batch, encode_record_batch
from tamto_router.key_holds import KeyHolds
from tamto_router.model import Batch, SubscriptionType
from tamto_router.runs import Run, as_runs, unacked_runs
from tamto_router.strategies.base import Host, Strategy, own_only

if TYPE_CHECKING:
    from tamto_router.key_holds import Key


class KeyShared(Strategy):
    type = SubscriptionType.KEY_SHARED
    keyed = True

    def __init__(self) -> None:
        self.keys = KeyHolds()  # who holds each key, which keys wait

    def ackable(
        self, ranges: list[tuple[int, int]], slot_id: int, in_flight: list[Run]
    ) -> list[tuple[int, int]]:
        return own_only(ranges, slot_id, in_flight)

    def given_back(self, first: int, last: int) -> None:
        self.keys.give_back(first, last)

    def settled(self, ranges: list[tuple[int, int]]) -> None:
        self.keys.settle_ranges(ranges)

    async def dispatch(self, host: Host, now: float) -> bool:
        """One round of key-shared delivery; True when anything moved.

        Each message goes to the consumer its key hashes to. A message waits
        (as a pending run) when that consumer has no credit, when an earlier
        message of its key is still in flight at another consumer (a key that
        moved is not handed over until its old consumer acked it), or when an
        earlier message of its key is waiting: order per key holds.
        """
        if not host.consumers.any_credit():
            return False
        self.keys.keep_waiting_only(host.waiting())
        # Older (waiting) messages first, then fresh ones: per key, offsets ascend.
        due = host.take_due(now)
        sources = [(r.first, r.last, r.count, False) for r in due]
        fresh_end = host.fresh_end()
        if host.position < fresh_end:
            credit = host.consumers.credit_up_to(host.read_max)
            want = max(1, min(host.read_max, credit, fresh_end - host.position))
            sources.append((host.position, host.position + want - 1, 0, True))
        if not sources:
            return False
        blocked: set[Key] = set()
        progress = False
        slices = LoopSlices()
        for first, last, count, fresh in sources:
            await slices.pause()
            read = await host.read(first, last - first + 1)
            if read is None:  # below the partition's start: skipped to it
                if not fresh and last >= host.log.start_offset:
                    host.wait(Run(host.log.start_offset, last, count, now))
                progress = True
                continue
            batches = read
            if fresh and batches and batches[0].base_offset > first:
                # Nothing is stored before it (retention dropped acked messages): skip the gap.
                # `host.read` settled the gap's offsets (`_settle_holes`: the ack floor);
                # this moves the read window past it, or a gap wider than a read would
                # never be passed (test_key_shared_skips_offsets_retention_removed).
                gap = batches[0].base_offset - first
                first, last = first + gap, last + gap
            end = first
            for batch in batches:
                if batch.base_offset > last:
                    break
                progress |= self._hand_out(host, batch, first, last, count, blocked, now)
                end = max(end, min(batch.end, last + 1))
            if fresh and end > host.position:
                host.advance(end)
                progress = True
            elif not fresh and first < end <= last:
                # A read returns a bounded number of bytes: the rest of the run waits.
                host.wait(Run(end, last, count, now))
        return progress

    def _hand_out(
        self,
        host: Host,
        batch: Batch,
        lo: int,
        hi: int,
        previous_count: int,
        blocked: set[Key],
        now: float,
    ) -> bool:
        runs = unacked_runs(batch, lo, hi, host.acks)
        if not runs:
            return False
        if not host.consumers:  # they all left while we read: keep it for the next ones
            for first, length in runs:
                host.wait(Run(first, first + length - 1, previous_count, now))
            return False
        decoded = decode_batch(batch.arrow_ipc)
        keys = decoded.column("key").to_pylist()
        budget: dict[int, int] = {}  # slot id -> credit left, for the consumers keys hash to
        chosen: dict[int, list[int]] = {}
        waiting: list[int] = []
        for first, length in runs:
            for offset in range(first, first + length):
                key = keys[offset - batch.base_offset]
                target = host.consumers.owner(key).id
                if target not in budget:
                    budget[target] = host.consumers.by_id(target).credit.available
                if (
                    key in blocked
                    or budget[target] <= 0
                    or not self.keys.may_deliver(offset, key, target)
                ):
                    blocked.add(key)
                    waiting.append(offset)
                    continue
                budget[target] -= 1
                chosen.setdefault(target, []).append(offset)
                self.keys.deliver(offset, key, target)
        for first, last in as_runs(waiting):
            host.wait(Run(first, last, previous_count, now))
        for target, offsets in chosen.items():
            rows = [o - batch.base_offset for o in offsets]
            data = encode_record_batch(decoded.take(rows))
            piece = Batch(offsets[0], len(offsets), batch.publish_time_us, data)
            host.hand(host.consumers.by_id(target), piece, previous_count + 1, now, offsets)
        return bool(chosen)
