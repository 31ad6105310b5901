"""Unit tests of one subscription's dispatch, with an in-memory log standing in for storage."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tamto_common.errors import FailedPrecondition, InvalidArgument
from tamto_protocol.batch import BatchColumns, decode_batch, encode_batch
from tamto_router.acks import AckSet
from tamto_router.storage_client import Batch
from tamto_router.subscription import (
    ConsumerSlot,
    Delivery,
    Subscription,
    SubscriptionType,
)


def batch(base: int, n: int) -> Batch:
    payloads = [f"m{base + i}".encode() for i in range(n)]
    data = encode_batch(BatchColumns(payloads, [None] * n, [None] * n, [None] * n, [None] * n))
    return Batch(base, n, 0, data)


class MemoryStorage:
    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches
        self.commits: list[tuple[int, list[tuple[int, int]]]] = []

    async def read(self, stream: str, p: int, start: int, want: int) -> tuple[list[Batch], int]:
        out, n = [], 0
        for b in self.batches:
            if b.end <= start:
                continue
            out.append(b)
            n += b.count
            if n >= want:
                break
        return out, out[-1].end if out else start

    async def commit_cursor(self, stream: str, p: int, sub: str, epoch: int, acks: AckSet) -> None:
        self.commits.append((acks.floor, list(acks.ranges)))


class MemoryLog:
    def __init__(self, batches: list[Batch]) -> None:
        self.stream, self.partition, self.epoch = "s", 0, 1
        self.storage = MemoryStorage(batches)
        self.start_offset = 0
        self.durable_offset = batches[-1].end if batches else 0
        self.failure: Exception | None = None
        self.listeners: set[Callable[[], None]] = set()
        self.subscriptions: dict[str, Any] = {}


async def next_delivery(slot: ConsumerSlot, within_s: float = 5.0) -> Delivery:
    item = await asyncio.wait_for(slot.outbox.get(), within_s)
    assert isinstance(item, Delivery)
    return item


async def nothing_within(slot: ConsumerSlot, seconds: float) -> bool:
    try:
        await asyncio.wait_for(slot.outbox.get(), seconds)
    except TimeoutError:
        return True
    return False


def offsets(d: Delivery) -> list[int]:
    return list(range(d.batch.base_offset, d.batch.base_offset + d.batch.count))


def payloads(d: Delivery) -> list[bytes]:
    return [bytes(p) for p in decode_batch(d.batch.arrow_ipc).column("payload").to_pylist()]


def subscription(batches: list[Batch], ack_timeout_s: float = 30.0) -> Subscription:
    return Subscription(MemoryLog(batches), "sub", AckSet(0), ack_timeout_s, 1000)  # type: ignore[arg-type]


def slot_with_credit(name: str = "", credit: int = 100) -> ConsumerSlot:
    slot = ConsumerSlot(name)
    slot.credit.grant(credit)
    return slot


async def test_shared_spreads_batches_round_robin_and_delivers_each_once() -> None:
    sub = subscription([batch(0, 2), batch(2, 2), batch(4, 2), batch(6, 2)])
    a, b = slot_with_credit("a", 2), slot_with_credit("b", 2)
    sub.attach(a, SubscriptionType.SHARED)
    sub.attach(b, SubscriptionType.SHARED)
    got_a, got_b = await next_delivery(a), await next_delivery(b)
    assert set(offsets(got_a)).isdisjoint(offsets(got_b))
    a.credit.grant(2)
    b.credit.grant(2)
    sub.poke()
    rest = [await next_delivery(a), await next_delivery(b)]
    seen = sorted(o for d in [got_a, got_b, *rest] for o in offsets(d))
    assert seen == list(range(8))
    await sub.close()


async def test_exclusive_refuses_a_second_consumer_and_a_different_type() -> None:
    sub = subscription([batch(0, 1)])
    sub.attach(slot_with_credit(), SubscriptionType.EXCLUSIVE)
    with pytest.raises(FailedPrecondition, match="already has a consumer"):
        sub.attach(slot_with_credit(), SubscriptionType.EXCLUSIVE)
    with pytest.raises(FailedPrecondition, match="is exclusive, not shared"):
        sub.attach(slot_with_credit(), SubscriptionType.SHARED)
    await sub.close()


async def test_failover_gives_everything_to_one_and_hands_unacked_to_the_next() -> None:
    sub = subscription([batch(0, 3)])
    first, second = slot_with_credit("a"), slot_with_credit("b")
    sub.attach(first, SubscriptionType.FAILOVER)
    sub.attach(second, SubscriptionType.FAILOVER)
    delivered = await next_delivery(first)
    assert offsets(delivered) == [0, 1, 2]
    assert delivered.delivery_count == 1
    assert await nothing_within(second, 0.1)
    await sub.ack([(0, 0)])
    sub.detach(first)
    again = await next_delivery(second)
    assert offsets(again) == [1, 2], "only the unacked messages move"
    assert again.delivery_count == 2
    await sub.close()


async def test_ack_timeout_redelivers_with_a_higher_delivery_count() -> None:
    sub = subscription([batch(0, 2)], ack_timeout_s=0.2)
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    assert (await next_delivery(slot)).delivery_count == 1
    await sub.ack([(1, 1)])
    again = await next_delivery(slot, within_s=5)
    assert offsets(again) == [0]
    assert payloads(again) == [b"m0"]
    assert again.delivery_count == 2
    await sub.close()


async def test_nack_redelivers_at_once_or_after_its_delay() -> None:
    sub = subscription([batch(0, 4)])
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    await next_delivery(slot)
    sub.nack([(1, 1)], delay_s=0)
    now = await next_delivery(slot)
    assert (offsets(now), now.delivery_count) == ([1], 2)
    sub.nack([(2, 3)], delay_s=0.3)
    assert await nothing_within(slot, 0.1), "a delayed nack waits"
    later = await next_delivery(slot)
    assert (offsets(later), later.delivery_count) == ([2, 3], 2)
    await sub.close()


async def test_acked_messages_never_come_back_and_acks_are_persisted() -> None:
    sub = subscription([batch(0, 3)], ack_timeout_s=0.1)
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    await next_delivery(slot)
    await sub.ack([(0, 2)])
    assert await nothing_within(slot, 0.3)
    assert sub.log.storage.commits[-1] == (3, [])  # type: ignore[attr-defined]
    await sub.close()


async def test_credit_bounds_delivery() -> None:
    sub = subscription([batch(0, 1), batch(1, 1), batch(2, 1)])
    slot = slot_with_credit(credit=1)
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    assert offsets(await next_delivery(slot)) == [0]
    assert await nothing_within(slot, 0.1), "no credit, no delivery"
    slot.credit.grant(2)
    sub.poke()
    assert offsets(await next_delivery(slot)) + offsets(await next_delivery(slot)) == [1, 2]
    await sub.close()


async def test_acks_beyond_the_log_are_refused() -> None:
    sub = subscription([batch(0, 2)])
    with pytest.raises(InvalidArgument, match="holds offsets below 2"):
        await sub.ack([(1, 5)])
    with pytest.raises(InvalidArgument):
        sub.nack([(3, 2)], 0)
    await sub.close()


async def test_shared_honours_credit_exactly_by_slicing_batches() -> None:
    sub = subscription([batch(0, 10)])
    a, b = slot_with_credit("a", 3), slot_with_credit("b", 3)
    sub.attach(a, SubscriptionType.SHARED)
    sub.attach(b, SubscriptionType.SHARED)
    got_a, got_b = await next_delivery(a), await next_delivery(b)
    assert (len(offsets(got_a)), len(offsets(got_b))) == (3, 3)
    assert sorted(offsets(got_a) + offsets(got_b)) == list(range(6))
    assert payloads(got_b) == [f"m{o}".encode() for o in offsets(got_b)]
    assert await nothing_within(a, 0.1), "no credit left, nothing more"
    await sub.close()
