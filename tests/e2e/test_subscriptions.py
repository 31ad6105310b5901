"""Subscription types, start positions, acks, nacks and redelivery, on real processes."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import pytest

import tamto_sdk
from tamto_sdk import Start, SubscriptionType

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def publish(client: tamto_sdk.Client, stream: str, payloads: list[bytes]) -> list[int]:
    async with client.producer(stream) as producer:
        futures = [await producer.send(p) for p in payloads]
        return [(await f).offset for f in futures]


async def take(
    consumer: tamto_sdk.Consumer, n: int, within_s: float = 15
) -> list[tamto_sdk.Message]:
    got: list[tamto_sdk.Message] = []
    deadline = time.monotonic() + within_s
    while len(got) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(got)} of {n} messages arrived"
        batch = await consumer.receive_batch(max_messages=n - len(got), timeout_s=left)
        got.extend(batch)
    return got


async def silent(consumer: tamto_sdk.Consumer, seconds: float) -> bool:
    return len(await consumer.receive_batch(max_messages=1, timeout_s=seconds)) == 0


async def test_shared_consumers_split_the_messages_and_see_each_once(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("shared")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, [f"m{i}".encode() for i in range(200)])
    seen: dict[str, list[bytes]] = {"a": [], "b": []}

    async def consume(name: str, c: tamto_sdk.Consumer) -> None:
        while sum(len(v) for v in seen.values()) < 200:
            batch = await c.receive_batch(max_messages=10, timeout_s=0.5)
            seen[name].extend(m.payload for m in batch)
            c.ack(batch)

    shared = SubscriptionType.SHARED
    async with (
        tamto_client.consumer(
            stream, "work", subscription_type=shared, credits=10, consumer_name="a"
        ) as a,
        tamto_client.consumer(
            stream, "work", subscription_type=shared, credits=10, consumer_name="b"
        ) as b,
    ):
        await asyncio.wait_for(asyncio.gather(consume("a", a), consume("b", b)), 30)
    assert seen["a"], "both consumers get work"
    assert seen["b"], "both consumers get work"
    everything = seen["a"] + seen["b"]
    assert sorted(everything) == sorted(f"m{i}".encode() for i in range(200))


async def test_failover_delivers_to_one_consumer_and_moves_unacked_work_on_leave(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("failover")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, [f"m{i}".encode() for i in range(20)])
    fo = SubscriptionType.FAILOVER
    standby = tamto_client.consumer(stream, "ha", subscription_type=fo, consumer_name="b")
    async with tamto_client.consumer(
        stream, "ha", subscription_type=fo, consumer_name="a"
    ) as active:
        first = await take(active, 20)
        async with standby:
            assert await silent(standby, 0.5), "the standby gets nothing while the active lives"
            active.ack_cumulative(first[9])
            await active.flush_acks(5)
            await active.close()
            moved = await take(standby, 10)
            assert [m.offset for m in moved] == list(range(10, 20))
            # Handed back by a clean close, not failed: the delivery is not charged.
            assert all(m.delivery_count == 1 for m in moved)
            standby.ack(moved[-1])


async def test_exclusive_refuses_a_different_type(tamto_client: tamto_sdk.Client) -> None:
    stream = unique("excl-type")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, [b"x"])
    async with tamto_client.consumer(stream, "one") as first:
        await take(first, 1)
        with pytest.raises(tamto_sdk.errors.FailedPrecondition, match="is exclusive, not shared"):
            async with tamto_client.consumer(
                stream, "one", subscription_type=SubscriptionType.SHARED
            ) as c:
                await c.receive_batch(max_messages=1, timeout_s=10)


async def test_nack_redelivers_at_once_and_after_a_delay(tamto_client: tamto_sdk.Client) -> None:
    stream = unique("nack")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, [b"a", b"b"])
    async with tamto_client.consumer(stream, "n") as consumer:
        a, b = await take(consumer, 2)
        assert (a.delivery_count, b.delivery_count) == (1, 1)
        consumer.ack(b)
        consumer.nack(a)
        again = (await take(consumer, 1))[0]
        assert (again.offset, again.payload, again.delivery_count) == (a.offset, b"a", 2)
        nacked_at = time.monotonic()
        consumer.nack(again, delay_s=1.0)
        third = (await take(consumer, 1))[0]
        assert time.monotonic() - nacked_at >= 0.9, "a delayed nack waits its delay"
        assert third.delivery_count == 3
        consumer.ack(third)


async def test_unacked_messages_come_back_after_the_ack_timeout(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("timeout")
    await tamto_client.streams.ensure(
        stream, partitions=1, config=tamto_sdk.StreamConfig(ack_timeout_ms=500)
    )
    await publish(tamto_client, stream, [b"slow", b"fast"])
    async with tamto_client.consumer(stream, "t") as consumer:
        _slow, fast = await take(consumer, 2)
        consumer.ack(fast)
        again = (await take(consumer, 1, within_s=10))[0]
        assert (again.payload, again.delivery_count) == (b"slow", 2)
        consumer.ack(again)


async def test_a_consumer_that_leaves_gets_its_unacked_messages_redelivered_to_the_next(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("leave")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, [f"m{i}".encode() for i in range(10)])
    async with tamto_client.consumer(stream, "l") as first:
        got = await take(first, 10)
        for m in got[:5]:
            first.ack(m)
    async with tamto_client.consumer(stream, "l") as second:
        rest = await take(second, 5)
        assert [m.payload for m in rest] == [f"m{i}".encode() for i in range(5, 10)]
        assert await silent(second, 0.3)


async def test_start_positions_earliest_latest_offset_and_time(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("start")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, [b"old0", b"old1", b"old2"])
    # Create "latest" and "time" subscriptions now; they begin after the old messages.
    async with tamto_client.consumer(stream, "latest", start=Start.latest()) as c:
        assert await silent(c, 0.3)
    boundary = datetime.now(UTC)
    await publish(tamto_client, stream, [b"new0", b"new1"])

    async def payloads(sub: str, start: tamto_sdk.StartPosition, n: int) -> list[bytes]:
        async with tamto_client.consumer(stream, sub, start=start) as consumer:
            got = [m.payload for m in await take(consumer, n)]
            assert await silent(consumer, 0.3)
            return got

    assert await payloads("earliest", Start.earliest(), 5) == [
        b"old0",
        b"old1",
        b"old2",
        b"new0",
        b"new1",
    ]
    assert await payloads("latest", Start.latest(), 2) == [b"new0", b"new1"]
    assert await payloads("from-2", Start.offset(2), 3) == [b"old2", b"new0", b"new1"]
    assert await payloads("since", Start.time(boundary), 2) == [b"new0", b"new1"]
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match="outside"):
        await payloads("too-far", Start.offset(99), 1)
