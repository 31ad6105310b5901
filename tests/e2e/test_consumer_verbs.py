"""Consumer verbs beyond ack and nack: `term` and `in_progress`, end to end."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import tamto_sdk
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e


async def test_term_sends_a_message_to_the_dead_letter_stream_at_once_with_its_reason(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = f"verbs-{uuid.uuid4().hex[:8]}"
    # A short ack timeout: a termed message that were merely dropped would come back.
    await tamto_client.streams.ensure(
        stream, partitions=1, config=tamto_sdk.StreamConfig(ack_timeout_ms=500)
    )
    async with tamto_client.producer(stream) as producer:
        for payload in (b"good", b"poison"):
            await producer.send_and_wait(payload, headers={"trace": "t9"})

    async with tamto_client.consumer(stream, "billing") as consumer:
        seen: list[tamto_sdk.Message] = []
        while len(seen) < 2:
            seen.extend(await consumer.receive_batch(max_messages=10, timeout_s=10))
        good, poison = seen
        assert poison.payload == b"poison"
        assert poison.delivery_count == 1
        consumer.ack(good)
        consumer.term(poison, "bad schema")
        await consumer.flush_acks(timeout_s=10)

        async def dead_letter_stream_exists() -> bool:
            names = {info.name for info in await tamto_client.streams.list()}
            return f"{stream}.dlq" in names

        # The router creates the dead-letter stream as it applies the term.
        await eventually(dead_letter_stream_exists, 30, "the dead-letter stream the term creates")
        async with tamto_client.consumer(f"{stream}.dlq", "inspect") as dlq:
            (dead,) = await dlq.receive_batch(max_messages=10, timeout_s=30)
            assert dead.payload == b"poison"
            assert dead.headers["trace"] == "t9"
            assert dead.headers["tamto.dlq.reason"] == "term: bad schema"
            assert dead.headers["tamto.dlq.offset"] == "1"
            assert dead.headers["tamto.dlq.subscription"] == "billing"
            assert dead.headers["tamto.dlq.delivery_count"] == "1"
            dlq.ack(dead)
        # Three ack timeouts: neither message comes back.
        assert len(await consumer.receive_batch(max_messages=10, timeout_s=1.5)) == 0


async def test_in_progress_keeps_a_slow_message_from_being_redelivered_past_its_ack_timeout(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = f"verbs-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(
        stream, partitions=1, config=tamto_sdk.StreamConfig(ack_timeout_ms=2000)
    )
    async with tamto_client.producer(stream) as producer:
        for payload in (b"slow", b"control"):
            await producer.send_and_wait(payload)

    async with tamto_client.consumer(stream, "work") as consumer:
        first: list[tamto_sdk.Message] = []
        while len(first) < 2:
            first.extend(await consumer.receive_batch(max_messages=10, timeout_s=10))
        slow = first[0]
        assert slow.payload == b"slow"
        # Work on `slow` for two and a half ack timeouts, saying so every 0.3 s;
        # `control` is neither acked nor marked, so its timeout brings it back.
        redelivered: list[tuple[bytes, int]] = []
        loop = asyncio.get_running_loop()
        until = loop.time() + 5.0
        while loop.time() < until:
            consumer.in_progress(slow)
            for message in await consumer.receive_batch(max_messages=10, timeout_s=0.3):
                redelivered.append((message.payload, message.delivery_count))
                if message.payload == b"control":
                    consumer.ack(message)
        assert (b"control", 2) in redelivered
        assert all(payload != b"slow" for payload, _ in redelivered), redelivered
        consumer.ack(slow)
        await consumer.flush_acks(timeout_s=10)
        assert len(await consumer.receive_batch(max_messages=10, timeout_s=1.5)) == 0


async def test_term_refuses_an_overlong_reason_before_sending(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = f"verbs-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    async with tamto_client.producer(stream) as producer:
        await producer.send_and_wait(b"x")
    async with tamto_client.consumer(stream, "s") as consumer:
        (message,) = await consumer.receive_batch(max_messages=1, timeout_s=10)
        with pytest.raises(tamto_sdk.errors.InvalidArgument, match="at most 1024"):
            consumer.term(message, "r" * 1025)
        with pytest.raises(ValueError, match="at most 1024"):  # InvalidArgument is one
            consumer.term(message, "r" * 1025)
        consumer.ack(message)
