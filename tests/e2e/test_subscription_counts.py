"""A subscription's redelivery and dead-letter counts (`tamto sub describe`) are kept
with its cursor: they survive a restart of the router that counted them."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import tamto_sdk
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e


async def nack_until_dead_lettered(client: tamto_sdk.Client, stream: str) -> None:
    """Ack the good message, nack the poison one until it went to the dead-letter stream."""
    async with client.consumer(stream, "billing") as consumer:
        deliveries = 0
        while deliveries < 3:  # good, poison, poison again (then dead-lettered)
            batch = await consumer.receive_batch(max_messages=10, timeout_s=10)
            assert len(batch) > 0, f"stalled after {deliveries} deliveries"
            for message in batch:
                deliveries += 1
                if message.payload == b"poison":
                    consumer.nack(message)
                else:
                    consumer.ack(message)
        await consumer.flush_acks(timeout_s=10)


async def counts(client: tamto_sdk.Client, stream: str) -> tuple[int, int]:
    (part,) = (await client.subscriptions.describe(stream, "billing")).partitions
    return part.redeliveries, part.dead_lettered


async def test_redeliveries_and_dead_letters_survive_a_router_restart(
    fresh_cluster: TestCluster,
) -> None:
    stream = f"counts-{uuid.uuid4().hex[:8]}"
    async with await tamto_sdk.connect(
        fresh_cluster.url, api_key=fresh_cluster.credential
    ) as client:
        await client.streams.ensure(
            stream, partitions=1, config=tamto_sdk.StreamConfig(max_deliveries=2)
        )
        async with client.producer(stream) as producer:
            for payload in (b"good", b"poison"):
                await producer.send_and_wait(payload)
        await nack_until_dead_lettered(client, stream)

        async def counted() -> bool:
            return await counts(client, stream) == (1, 1)

        await eventually(counted, 30, "one redelivery and one dead letter counted")

        await asyncio.to_thread(fresh_cluster.stop, "router")
        await asyncio.to_thread(fresh_cluster.start, "router")

        after: list[tuple[int, int]] = []

        async def described() -> bool:
            try:
                after.append(await counts(client, stream))
            except tamto_sdk.errors.Unavailable:
                return False
            return True

        await eventually(described, 30, "describe to answer after the restart")
        assert after[-1] == (1, 1)
