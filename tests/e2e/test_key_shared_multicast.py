"""Key-shared and multicast subscriptions on real processes."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import tamto_sdk
from tamto_sdk import SubscriptionType

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def publish_keyed(client: tamto_sdk.Client, stream: str, n: int, keys: int) -> None:
    async with client.producer(stream) as producer:
        futures = [
            await producer.send(f"{i}".encode(), key=f"key-{i % keys}".encode()) for i in range(n)
        ]
        await asyncio.gather(*futures)


async def test_key_shared_keeps_each_key_on_one_consumer_in_order(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("ks")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish_keyed(tamto_client, stream, 400, keys=20)
    seen: dict[str, list[tamto_sdk.Message]] = {"a": [], "b": []}

    async def consume(name: str, consumer: tamto_sdk.Consumer) -> None:
        while sum(len(v) for v in seen.values()) < 400:
            batch = await consumer.receive_batch(max_messages=50, timeout_s=0.5)
            seen[name].extend(batch)
            consumer.ack(batch)

    ks = SubscriptionType.KEY_SHARED
    async with (
        tamto_client.consumer(
            stream, "orders", subscription_type=ks, consumer_name="a", credits=50
        ) as a,
        tamto_client.consumer(
            stream, "orders", subscription_type=ks, consumer_name="b", credits=50
        ) as b,
    ):
        await asyncio.wait_for(asyncio.gather(consume("a", a), consume("b", b)), 60)

    owners: dict[bytes | None, set[str]] = {}
    for name, messages in seen.items():
        for m in messages:
            owners.setdefault(m.key, set()).add(name)
    assert len(owners) == 20
    assert all(len(names) == 1 for names in owners.values()), "a key never splits"
    assert seen["a"], "both consumers get keys"
    assert seen["b"], "both consumers get keys"
    for messages in seen.values():
        by_key: dict[bytes | None, list[int]] = {}
        for m in messages:
            by_key.setdefault(m.key, []).append(m.offset)
        assert all(v == sorted(v) for v in by_key.values()), "order per key"
    everything = sorted(int(m.payload) for v in seen.values() for m in v)
    assert everything == list(range(400))


async def test_multicast_gives_every_consumer_every_message_with_its_own_acks(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("mc")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish_keyed(tamto_client, stream, 30, keys=3)
    mc = SubscriptionType.MULTICAST

    async def read(name: str, n: int, ack: bool) -> list[bytes]:
        got: list[bytes] = []
        async with tamto_client.consumer(
            stream, "audit", subscription_type=mc, consumer_name=name
        ) as c:
            while len(got) < n:
                batch = await c.receive_batch(max_messages=n, timeout_s=10)
                assert len(batch) > 0, f"{name} got only {len(got)}"
                got.extend(m.payload for m in batch)
                if ack:
                    c.ack(batch)
        return got

    expected = [f"{i}".encode() for i in range(30)]
    assert await read("alpha", 30, ack=True) == expected
    assert await read("beta", 30, ack=False) == expected, "alpha's acks are not beta's"
    assert await read("beta", 30, ack=True) == expected, "beta never acked: all come again"
    async with tamto_client.consumer(
        stream, "audit", subscription_type=mc, consumer_name="alpha"
    ) as c:
        assert len(await c.receive_batch(max_messages=1, timeout_s=1)) == 0

    with pytest.raises(tamto_sdk.errors.InvalidArgument, match="needs a consumer_name"):
        async with tamto_client.consumer(stream, "audit", subscription_type=mc) as nameless:
            await nameless.receive_batch(max_messages=1, timeout_s=10)
