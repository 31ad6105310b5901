"""Unit tests of one subscription's dispatch, with an in-memory log standing in for storage."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest

from tamto_common.errors import FailedPrecondition, InvalidArgument
from tamto_protocol.batch import BatchColumns, decode_batch, encode_batch
from tamto_router.acks import AckSet
from tamto_router.dead_letters import Policy
from tamto_router.model import Batch
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

    async def commit_cursor(
        self, stream: str, p: int, sub: str, epoch: int, acks: AckSet, replace: bool = False
    ) -> None:
        self.commits.append((acks.floor, list(acks.ranges)))


class MemoryLog:
    def __init__(self, batches: list[Batch]) -> None:
        self.stream, self.partition, self.epoch = "s", 0, 1
        self.storage = MemoryStorage(batches)
        self.replicas: dict[str, Any] | None = None  # one storage node
        self.start_offset = 0
        self.durable_offset = batches[-1].end if batches else 0
        self.ledger_starts: tuple[int, ...] = ()  # one ledger: no drain gate
        self.failure: Exception | None = None
        self.listeners: set[Callable[[], None]] = set()
        self.subscriptions: dict[str, Any] = {}

    async def read(self, first: int, want: int) -> tuple[list[Batch], int]:
        """As `PartitionLog.read`: from the one storage node."""
        return await self.storage.read(self.stream, self.partition, first, want)


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


def memory_storage(sub: Subscription) -> MemoryStorage:
    """The test storage behind `sub` (typed as the real client on the subscription)."""
    return cast(MemoryStorage, sub.log.storage)


def subscription(
    batches: list[Batch],
    ack_timeout_s: float = 30.0,
    dead: list[tuple[str, bytes, int]] | None = None,
    **limits: Any,
) -> Subscription:
    async def publish_dead(stream: str, data: bytes, count: int) -> None:
        assert dead is not None
        dead.append((stream, data, count))

    policy = Policy(ack_timeout_s=ack_timeout_s, dead_letter_stream="s.dlq", **limits)
    log: Any = MemoryLog(batches)
    return Subscription(log, "sub", AckSet(0), policy, 1000, publish_dead)


def slot_with_credit(name: str = "", credit: int = 100, consumer_id: str = "") -> ConsumerSlot:
    slot = ConsumerSlot(name, consumer_id)
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


async def test_a_consumer_subscribing_again_takes_its_own_place() -> None:
    """A session whose stream died unnoticed is displaced by a new session of the same
    consumer (its `consumer_id`): it ends, and what it held unacked is redelivered to
    the newcomer. Another consumer, or one without an id, is still refused."""
    sub = subscription([batch(0, 2)])
    stale = slot_with_credit(consumer_id="c")
    sub.attach(stale, SubscriptionType.EXCLUSIVE)
    assert offsets(await next_delivery(stale)) == [0, 1]
    for other in (slot_with_credit(consumer_id="d"), slot_with_credit()):
        with pytest.raises(FailedPrecondition, match="already has a consumer"):
            sub.attach(other, SubscriptionType.EXCLUSIVE)
    again = slot_with_credit(consumer_id="c")
    sub.attach(again, SubscriptionType.EXCLUSIVE)
    ended = await asyncio.wait_for(stale.outbox.get(), 5.0)
    assert isinstance(ended, FailedPrecondition), ended
    assert "a newer session of this consumer took its place" in str(ended)
    assert list(sub.consumers) == [again]
    assert offsets(await next_delivery(again)) == [0, 1]
    await sub.close()


async def test_a_shared_consumer_subscribing_again_leaves_the_others_attached() -> None:
    sub = subscription([batch(0, 1)])
    stale, other = slot_with_credit(consumer_id="c"), slot_with_credit(consumer_id="d")
    sub.attach(stale, SubscriptionType.SHARED)
    sub.attach(other, SubscriptionType.SHARED)
    again = slot_with_credit(consumer_id="c")
    sub.attach(again, SubscriptionType.SHARED)
    assert set(sub.consumers) == {other, again}
    await sub.close()


async def test_the_type_is_the_first_consumers_and_changes_only_once_all_left() -> None:
    sub = subscription([batch(0, 2)])
    assert sub.type is None
    first = slot_with_credit("a", credit=1)
    sub.attach(first, SubscriptionType.EXCLUSIVE)
    assert sub.type is SubscriptionType.EXCLUSIVE
    assert offsets(await next_delivery(first)) == [0, 1]
    sub.detach(first, graceful=True)
    keyed = slot_with_credit("b")
    sub.attach(keyed, SubscriptionType.KEY_SHARED)  # nobody attached: the newcomer's type
    assert sub.type is SubscriptionType.KEY_SHARED
    assert sorted(delivered_offsets(await next_delivery(keyed))) == [0, 1]
    with pytest.raises(FailedPrecondition, match="is key_shared, not exclusive"):
        sub.attach(slot_with_credit(), SubscriptionType.EXCLUSIVE)
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


def dead_letter_rows(data: bytes) -> list[dict[str, str]]:
    return [dict(h) for h in decode_batch(data).column("headers").to_pylist()]


async def test_a_message_past_max_deliveries_is_dead_lettered_and_acked() -> None:
    dead: list[tuple[str, bytes, int]] = []
    sub = subscription([batch(0, 3)], dead=dead, max_deliveries=2)
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    await next_delivery(slot)
    await sub.ack([(0, 0), (2, 2)])
    sub.nack([(1, 1)], delay_s=0)
    second = await next_delivery(slot)
    assert (offsets(second), second.delivery_count) == ([1], 2)
    sub.nack([(1, 1)], delay_s=0)
    assert await nothing_within(slot, 0.3), "a third delivery never happens"
    assert len(dead) == 1
    stream, data, count = dead[0]
    assert (stream, count) == ("s.dlq", 1)
    assert payloads_of(data) == [b"m1"]
    (headers,) = dead_letter_rows(data)
    assert headers["tamto.dlq.stream"] == "s"
    assert headers["tamto.dlq.offset"] == "1"
    assert headers["tamto.dlq.delivery_count"] == "2"
    assert headers["tamto.dlq.reason"] == "max_deliveries"
    assert sub.acks.floor == 3, "the dead letter is acked: the cursor moves on"
    await sub.close()


async def test_an_unacked_message_too_far_behind_the_acked_ones_is_dead_lettered() -> None:
    dead: list[tuple[str, bytes, int]] = []
    sub = subscription([batch(0, 1), batch(1, 5), batch(6, 5)], dead=dead, max_lag=4)
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    assert offsets(await next_delivery(slot)) == [0]
    assert offsets(await next_delivery(slot)) == [1, 2, 3, 4, 5]
    assert offsets(await next_delivery(slot)) == [6, 7, 8, 9, 10]
    assert dead == [], "delivering a big batch puts nothing over the limit"
    await sub.ack([(1, 4)])
    assert dead == [], "offset 0 is 4 behind the newest ack: not more than max_lag"
    await sub.ack([(5, 10)])
    delivered_again = await nothing_within(slot, 0.2)
    assert delivered_again, "a dead-lettered message is not redelivered"
    assert [payloads_of(d[1]) for d in dead] == [[b"m0"]]
    assert dead_letter_rows(dead[0][1])[0]["tamto.dlq.reason"] == "max_lag"
    assert sub.acks.floor == 11
    await sub.close()


def payloads_of(data: bytes) -> list[bytes]:
    return [bytes(p) for p in decode_batch(data).column("payload").to_pylist()]


def keyed_batch(base: int, keys: list[bytes]) -> Batch:
    n = len(keys)
    payloads = [f"m{base + i}".encode() for i in range(n)]
    data = encode_batch(BatchColumns(payloads, list(keys), [None] * n, [None] * n, [None] * n))
    return Batch(base, n, 0, data)


def delivered_offsets(d: Delivery) -> list[int]:
    return list(d.offsets) if d.offsets is not None else offsets(d)


def delivered_keys(d: Delivery) -> list[bytes]:
    return [bytes(k) for k in decode_batch(d.batch.arrow_ipc).column("key").to_pylist()]


async def drain_slot(slot: ConsumerSlot) -> list[Delivery]:
    got = []
    while not slot.outbox.empty():
        item = slot.outbox.get_nowait()
        assert isinstance(item, Delivery)
        got.append(item)
    return got


async def collect(slots: dict[str, ConsumerSlot], total: int) -> list[tuple[str, Delivery]]:
    """Deliveries from every slot (with the slot's name) until `total` messages came."""
    got: list[tuple[str, Delivery]] = []
    count = 0
    async with asyncio.timeout(5):
        while count < total:
            gets = {asyncio.ensure_future(s.outbox.get()): n for n, s in slots.items()}
            done, pending = await asyncio.wait(gets, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            for task in done:
                item = task.result()
                assert isinstance(item, Delivery)
                got.append((gets[task], item))
                count += item.batch.count
    return got


def per_key(got: list[tuple[str, Delivery]]) -> dict[bytes, list[tuple[str, int]]]:
    out: dict[bytes, list[tuple[str, int]]] = {}
    for name, d in got:
        for offset, key in zip(delivered_offsets(d), delivered_keys(d), strict=True):
            out.setdefault(key, []).append((name, offset))
    return out


async def test_key_shared_sends_each_key_to_one_consumer_in_order() -> None:
    keys = [f"k{i % 16}".encode() for i in range(64)]
    sub = subscription([keyed_batch(0, keys)])
    slots = {"a": slot_with_credit("a"), "b": slot_with_credit("b")}
    for slot in slots.values():
        sub.attach(slot, SubscriptionType.KEY_SHARED)
    by_key = per_key(await collect(slots, 64))
    assert sorted(o for v in by_key.values() for _, o in v) == list(range(64))
    assert {name for v in by_key.values() for name, _ in v} == {"a", "b"}, "keys spread"
    for entries in by_key.values():
        assert len({name for name, _ in entries}) == 1, "one consumer per key"
        offsets_of_key = [o for _, o in entries]
        assert offsets_of_key == sorted(offsets_of_key), "order per key"
    await sub.close()


async def test_a_moved_key_waits_until_its_old_consumer_acked() -> None:
    keys = [f"k{i % 16}".encode() for i in range(32)]
    sub = subscription([keyed_batch(0, keys[:16]), keyed_batch(16, keys[16:])])
    a = slot_with_credit("a", 16)
    sub.attach(a, SubscriptionType.KEY_SHARED)
    first = per_key(await collect({"a": a}, 16))
    assert len(first) == 16
    b = slot_with_credit("b")
    sub.attach(b, SubscriptionType.KEY_SHARED)  # takes over some keys; a has no credit left
    assert await nothing_within(b, 0.2), "moved keys wait: their first messages are unacked at a"
    await sub.ack([(0, 15)])
    got = await collect({"b": b}, 1)
    assert got, "once acked, the moved keys flow to their new consumer"
    await sub.close()


async def test_a_poison_message_dead_letters_and_its_key_carries_on() -> None:
    dead: list[tuple[str, bytes, int]] = []
    sub = subscription([keyed_batch(0, [b"k", b"k", b"k"])], dead=dead, max_deliveries=2)
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.KEY_SHARED)
    d = await next_delivery(slot)
    assert delivered_offsets(d) == [0, 1, 2]
    await sub.ack([(1, 2)])
    sub.nack([(0, 0)], 0)
    again = await next_delivery(slot)
    assert (delivered_offsets(again), again.delivery_count) == ([0], 2)
    sub.nack([(0, 0)], 0)
    assert await nothing_within(slot, 0.3)
    assert [payloads_of(x[1]) for x in dead] == [[b"m0"]]
    assert sub.acks.floor == 3
    await sub.close()


class GatedStorage(MemoryStorage):
    """Reads wait at a gate, so a test can act while the dispatcher is mid-read."""

    def __init__(self, batches: list[Batch]) -> None:
        super().__init__(batches)
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = asyncio.Event()

    async def read(self, stream: str, p: int, start: int, want: int) -> tuple[list[Batch], int]:
        if not self.gate.is_set():
            self.waiting.set()
            await self.gate.wait()
        return await super().read(stream, p, start, want)


async def test_messages_given_back_during_a_read_still_go_before_their_keys_later_ones() -> None:
    sub = subscription([keyed_batch(0, [b"k"])])
    storage = GatedStorage(memory_storage(sub).batches)
    sub.log.storage = storage  # type: ignore[assignment]
    a = slot_with_credit("a", 5)
    sub.attach(a, SubscriptionType.KEY_SHARED)
    assert delivered_offsets(await next_delivery(a)) == [0]
    # A second message of the key arrives; the dispatcher reads it, and while it
    # reads, a leaves (giving 0 back) and b takes over the key.
    storage.gate.clear()
    storage.batches.append(keyed_batch(1, [b"k"]))
    sub.log.durable_offset = 2
    sub.poke()
    await asyncio.wait_for(storage.waiting.wait(), 5)
    b = slot_with_credit("b", 5)
    sub.attach(b, SubscriptionType.KEY_SHARED)
    sub.detach(a, graceful=True)
    storage.gate.set()
    got = [delivered_offsets(await next_delivery(b)) for _ in range(2)]
    assert [o for d in got for o in d] == [0, 1], "the key's order holds across the hand-over"
    await sub.close()


async def test_a_nacked_message_holds_back_the_later_messages_of_its_key() -> None:
    sub = subscription([keyed_batch(0, [b"k", b"j"])])
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.KEY_SHARED)
    assert delivered_offsets(await next_delivery(slot)) == [0, 1]
    sub.nack([(0, 1)], 0.3)
    memory_storage(sub).batches.append(keyed_batch(2, [b"k", b"i"]))
    sub.log.durable_offset = 4
    sub.poke()
    # Key i has nothing waiting and flows; key k's offset 2 waits for offset 0.
    assert delivered_offsets(await next_delivery(slot)) == [3]
    redelivered = await next_delivery(slot)
    assert (delivered_offsets(redelivered), redelivered.delivery_count) == ([0, 1], 2)
    assert delivered_offsets(await next_delivery(slot)) == [2]
    await sub.close()


async def test_key_shared_skips_offsets_retention_removed() -> None:
    # Offsets 0-9 were acked and removed by retention: the log starts again at 10.
    sub = subscription([keyed_batch(10, [b"k", b"j"])])
    slot = slot_with_credit(credit=2)  # reads of 2 offsets: the gap is wider than a read
    sub.attach(slot, SubscriptionType.KEY_SHARED)
    assert delivered_offsets(await next_delivery(slot)) == [10, 11]
    await sub.close()


@pytest.mark.parametrize(
    "kind", [SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER, SubscriptionType.KEY_SHARED]
)
async def test_a_new_ledger_is_delivered_only_once_the_earlier_ones_are_acked(
    kind: SubscriptionType,
) -> None:
    """The drain gate (docs/cluster.md section 4): offsets 0-3 are the old owner's
    ledger, 4-7 the new one's; nothing of the new ledger goes out until 0-3 are acked."""
    keys = [b"k0", b"k1", b"k0", b"k1"]
    sub = subscription([keyed_batch(0, keys), keyed_batch(4, keys)])
    cast(MemoryLog, sub.log).ledger_starts = (0, 4)
    slot = slot_with_credit("a")
    sub.attach(slot, kind)
    first = [o for d in [await next_delivery(slot)] for o in delivered_offsets(d)]
    while len(first) < 4:
        first += delivered_offsets(await next_delivery(slot))
    assert sorted(first) == [0, 1, 2, 3]
    assert await nothing_within(slot, 0.3), "the new ledger waits for the old one's acks"
    await sub.ack([(0, 2)], slot)
    assert await nothing_within(slot, 0.3), "offset 3 is not acked yet"
    await sub.ack([(3, 3)], slot)
    rest: list[int] = []
    while len(rest) < 4:
        rest += delivered_offsets(await next_delivery(slot))
    assert sorted(rest) == [4, 5, 6, 7]
    await sub.close()


async def test_a_shared_subscription_is_not_held_at_a_ledger_boundary() -> None:
    sub = subscription([batch(0, 4), batch(4, 4)])
    cast(MemoryLog, sub.log).ledger_starts = (0, 4)
    slot = slot_with_credit("a")
    sub.attach(slot, SubscriptionType.SHARED)
    got = offsets(await next_delivery(slot)) + offsets(await next_delivery(slot))
    assert got == list(range(8))
    await sub.close()
