"""Delivery timing and batching of one subscription: reads bounded in size,
acks committed behind delivery, fresh data handed out as soon as it is durable."""

from __future__ import annotations

import asyncio
from typing import Any

from test_subscription import MemoryLog, MemoryStorage, batch

from tamto_router.acks import AckSet
from tamto_router.dead_letters import Policy
from tamto_router.model import Batch
from tamto_router.subscription import ConsumerSlot, Delivery, Subscription, SubscriptionType


class OneBatchPerRead(MemoryStorage):
    """Storage whose reads return one batch at most (as a byte cap would)."""

    def __init__(self, batches: list[Batch]) -> None:
        super().__init__(batches)
        self.reads = 0

    async def read(self, stream: str, p: int, start: int, want: int) -> tuple[list[Batch], int]:
        self.reads += 1
        for b in self.batches:
            if b.end > start:
                return [b], b.end
        return [], start


class Log(MemoryLog):
    def __init__(self, batches: list[Batch]) -> None:
        super().__init__(batches)
        self.storage = OneBatchPerRead(batches)

    def grow(self, more: Batch) -> None:
        self.storage.batches.append(more)
        self.durable_offset = more.end
        for listener in list(self.listeners):
            listener()


def subscription(batches: list[Batch], commit_interval_s: float = 0.05) -> Subscription:
    policy = Policy(ack_timeout_s=30.0, dead_letter_stream="")
    log: Any = Log(batches)
    return Subscription(log, "sub", AckSet(0), policy, 1000, commit_interval_s=commit_interval_s)


def slot(credit: int = 100) -> ConsumerSlot:
    s = ConsumerSlot("")
    s.credit.grant(credit)
    return s


async def deliveries(s: ConsumerSlot, n: int) -> list[Delivery]:
    out = []
    for _ in range(n):
        item = await asyncio.wait_for(s.outbox.get(), 5)
        assert isinstance(item, Delivery)
        out.append(item)
    return out


def offsets(ds: list[Delivery]) -> list[int]:
    return [o for d in ds for o in range(d.batch.base_offset, d.batch.end)]


async def test_a_redelivered_run_longer_than_one_read_comes_back_whole() -> None:
    sub = subscription([batch(0, 2), batch(2, 2), batch(4, 2)])
    consumer = slot()
    sub.attach(consumer, SubscriptionType.EXCLUSIVE)
    assert offsets(await deliveries(consumer, 3)) == list(range(6))
    sub.nack([(0, 5)], 0)
    again = await deliveries(consumer, 3)
    assert offsets(again) == list(range(6)), "no part of the run is forgotten"
    assert {d.delivery_count for d in again} == {2}
    await sub.close()


async def test_fresh_data_is_handed_out_as_soon_as_it_is_durable() -> None:
    sub = subscription([batch(0, 1)])
    consumer = slot()
    sub.attach(consumer, SubscriptionType.SHARED)
    await deliveries(consumer, 1)
    sub.log.grow(batch(1, 3))  # type: ignore[attr-defined]
    (fresh,) = await asyncio.wait_for(deliveries(consumer, 1), 0.5)
    assert offsets([fresh]) == [1, 2, 3]
    await sub.close()


async def test_acks_apply_at_once_and_reach_storage_in_few_commits() -> None:
    sub = subscription([batch(i, 1) for i in range(50)], commit_interval_s=0.05)
    consumer = slot()
    sub.attach(consumer, SubscriptionType.EXCLUSIVE)
    got = await deliveries(consumer, 50)
    storage = sub.log.storage
    for d in got:
        await sub.ack([(d.batch.base_offset, d.batch.end - 1)])
    assert sub.in_flight == [], "acks apply before any commit"
    await sub.flush_acks()
    assert storage.commits[-1] == (50, [])  # type: ignore[attr-defined]
    assert len(storage.commits) < 10  # type: ignore[attr-defined]
    await sub.close()


async def test_closing_commits_the_last_acks() -> None:
    sub = subscription([batch(0, 2), batch(2, 2)], commit_interval_s=10.0)
    consumer = slot()
    sub.attach(consumer, SubscriptionType.EXCLUSIVE)
    await deliveries(consumer, 2)
    await sub.ack([(0, 1)])
    await asyncio.sleep(0.01)
    await sub.ack([(2, 3)])  # within the interval: not committed yet
    await sub.close()
    assert sub.log.storage.commits[-1] == (4, [])  # type: ignore[attr-defined]


async def test_offsets_storage_holds_no_message_for_are_settled_and_do_not_hold_the_drain_gate() -> (
    None
):
    # Offsets 10-19 are a hole (a range `tamto storage repair` recorded as lost); a
    # new ledger starts at 30. Without settling the hole, the ack floor stays at 10
    # and the drain gate holds the new ledger's messages back for good.
    sub = subscription([batch(0, 10), batch(20, 10), batch(30, 5)])
    sub.log.ledger_starts = (0, 30)
    consumer = slot()
    sub.attach(consumer, SubscriptionType.EXCLUSIVE)
    first = await deliveries(consumer, 2)
    assert [offsets([d]) for d in first] == [list(range(10)), list(range(20, 30))]
    for d in first:
        await sub.ack([(d.batch.base_offset, d.batch.end - 1)])
    assert sub.acks.floor == 30, "the hole 10-19 is settled with the acks around it"
    (newer,) = await asyncio.wait_for(deliveries(consumer, 1), 5.0)
    assert offsets([newer]) == list(range(30, 35)), "the next ledger is delivered once"
    await sub.close()
