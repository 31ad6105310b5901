"""A subscription's redelivery and dead-letter counts go on from what its cursor held
when it was loaded, and are committed with the cursor (so they outlive the router)."""

from __future__ import annotations

from typing import Any

from test_subscription import MemoryLog, MemoryStorage, batch, next_delivery, slot_with_credit

from tamto_router.acks import AckSet
from tamto_router.dead_letters import Policy
from tamto_router.model import Batch
from tamto_router.subscription import Subscription, SubscriptionType
from tamto_testing.waiting import eventually


class CountingStorage(MemoryStorage):
    """Keeps the counts each cursor commit carried."""

    def __init__(self, batches: list[Batch]) -> None:
        super().__init__(batches)
        self.counts: list[tuple[int, int]] = []

    async def commit_cursor(
        self, stream: str, p: int, sub: str, epoch: int, acks: AckSet, replace: bool = False
    ) -> None:
        await super().commit_cursor(stream, p, sub, epoch, acks, replace)
        self.counts.append((acks.redeliveries, acks.dead_lettered))


async def test_counts_go_on_from_the_loaded_cursor_and_are_committed_with_it() -> None:
    batches = [batch(0, 3)]
    log: Any = MemoryLog(batches)
    storage = log.storage = CountingStorage(batches)
    dead: list[bytes] = []

    async def publish_dead(stream: str, data: bytes, count: int) -> None:
        dead.append(data)

    policy = Policy(ack_timeout_s=30, dead_letter_stream="s.dlq", max_deliveries=2)
    loaded = AckSet(0, [], redeliveries=5, dead_lettered=1)  # as a restarted router loads it
    sub = Subscription(log, "sub", loaded, policy, 1000, publish_dead, commit_interval_s=0)
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    await next_delivery(slot)  # offsets 0-2, first delivery
    sub.nack([(1, 1)], delay_s=0)
    again = await next_delivery(slot)
    assert again.delivery_count == 2
    sub.nack([(1, 1)], delay_s=0)  # its last delivery: dead-lettered
    await eventually(lambda: sub.dead_lettered == 2, 5, "offset 1 dead-lettered")
    await sub.ack([(0, 0), (2, 2)])
    await sub.flush_acks()
    assert len(dead) == 1
    assert storage.counts[-1] == (6, 2)
    await sub.close()
