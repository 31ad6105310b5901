"""Several batches in flight per producer and partition (`tamto_sdk.sender`,
`tamto_router.producer_turns`): order per key holds, a retry never stores twice,
and a router killed with batches in flight loses no acknowledged message and
stores none twice."""

from __future__ import annotations

import asyncio
import collections
import uuid

import pytest

import tamto_sdk
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e

KEYS = 8


def payload(key: int, n: int) -> bytes:
    return f"k{key}:{n}".encode()


async def drain(client: tamto_sdk.Client, stream: str, total: int) -> list[bytes]:
    """Every message of `stream` in the order each partition holds them, and a check
    that nothing beyond `total` is there."""
    got: list[bytes] = []
    async with client.consumer(stream, "check", credits=1000) as consumer:
        while len(got) < total:
            batch = await consumer.receive_batch(max_messages=1000, timeout_s=15)
            assert len(batch) > 0, f"only {len(got)} of {total} messages delivered"
            got.extend(m.payload for m in batch)
            consumer.ack(batch)
        extra = await consumer.receive_batch(max_messages=100, timeout_s=1.5)
        got.extend(m.payload for m in extra)
    return got


def assert_each_key_in_order_once(got: list[bytes], per_key: int) -> None:
    by_key: dict[int, list[int]] = collections.defaultdict(list)
    for p in got:
        name, n = p.decode()[1:].split(":")
        by_key[int(name)].append(int(n))
    for k in range(KEYS):
        assert by_key[k] == list(range(per_key)), (
            f"key {k}: stored out of order, twice or not at all: {by_key[k][:40]}..."
        )


async def test_keyed_batches_in_flight_together_keep_their_order_per_key(
    any_path_client: tamto_sdk.Client,
) -> None:
    per_key = 150
    stream = f"inorder-{uuid.uuid4().hex[:8]}"
    await any_path_client.streams.ensure(stream, partitions=2)
    most_in_flight = 0
    async with any_path_client.producer(stream, max_batch_messages=5, max_in_flight=5) as producer:
        futures = []
        for n in range(per_key):
            for key in range(KEYS):
                futures.append(await producer.send(payload(key, n), key=b"key-%d" % key))
            most_in_flight = max(most_in_flight, producer.in_flight_batches)
            await asyncio.sleep(0)
        await asyncio.gather(*futures)
    assert most_in_flight > 2, "more than one batch per partition was in flight at once"
    got = await drain(any_path_client, stream, per_key * KEYS)
    assert_each_key_in_order_once(got, per_key)


async def test_a_router_killed_with_batches_in_flight_loses_and_doubles_nothing(
    fresh_cluster: TestCluster,
) -> None:
    per_key, kill_at = 300, 80
    async with tamto_sdk.connect(fresh_cluster.url, api_key=fresh_cluster.credential) as client:
        await client.streams.ensure("inflight", partitions=2)
        async with client.producer("inflight", max_batch_messages=4, max_in_flight=5) as producer:
            futures = []
            killed_with = 0
            for n in range(per_key):
                for key in range(KEYS):
                    futures.append(await producer.send(payload(key, n), key=b"key-%d" % key))
                if n == kill_at:
                    await eventually(
                        lambda: producer.in_flight_batches > 2, 10, "several batches in flight"
                    )
                    killed_with = producer.in_flight_batches
                    fresh_cluster.kill9("router")  # at once: the batches stay in flight
                    await asyncio.to_thread(fresh_cluster.start, "router")
                await asyncio.sleep(0)
            # Every message is acknowledged: the producer retries through the restart.
            results = await asyncio.gather(*futures)
        assert killed_with > 2
        assert len(results) == per_key * KEYS
        got = await drain(client, "inflight", per_key * KEYS)
    assert_each_key_in_order_once(got, per_key)
