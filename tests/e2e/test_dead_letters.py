"""Dead letters: a poison message leaves the subscription for the dead-letter stream."""

from __future__ import annotations

import uuid

import pytest

import tamto_sdk

pytestmark = pytest.mark.e2e


async def test_a_message_nacked_past_max_deliveries_lands_in_the_dead_letter_stream(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = f"orders-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(
        stream, partitions=1, config=tamto_sdk.StreamConfig(max_deliveries=2)
    )
    async with tamto_client.producer(stream) as producer:
        for payload in (b"good-1", b"poison", b"good-2"):
            await producer.send_and_wait(payload, key=b"k", headers={"trace": "t1"})

    handled: list[tuple[bytes, int]] = []
    async with tamto_client.consumer(stream, "billing") as consumer:
        while len([p for p, _ in handled if p != b"poison"]) < 2 or len(handled) < 4:
            batch = await consumer.receive_batch(max_messages=10, timeout_s=10)
            assert len(batch) > 0, f"stalled after {handled}"
            for message in batch:
                handled.append((message.payload, message.delivery_count))
                if message.payload == b"poison":
                    consumer.nack(message)
                else:
                    consumer.ack(message)
        assert len(await consumer.receive_batch(max_messages=1, timeout_s=1)) == 0
    assert sorted(c for p, c in handled if p == b"poison") == [1, 2]

    async with tamto_client.consumer(f"{stream}.dlq", "inspect") as dlq:
        (dead,) = await dlq.receive_batch(max_messages=10, timeout_s=10)
        assert dead.payload == b"poison"
        assert dead.key == b"k"
        assert dead.headers["trace"] == "t1"
        assert dead.headers["tamto.dlq.stream"] == stream
        assert dead.headers["tamto.dlq.partition"] == "0"
        assert dead.headers["tamto.dlq.offset"] == "1"
        assert dead.headers["tamto.dlq.subscription"] == "billing"
        assert dead.headers["tamto.dlq.delivery_count"] == "2"
        assert dead.headers["tamto.dlq.reason"] == "max_deliveries"
        dlq.ack(dead)
