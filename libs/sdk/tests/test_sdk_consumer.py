from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from sdk_fake_gateway import FakeGateway

from tamto_sdk import Client, Closed, Message, NotFound, Start


async def _publish(client: Client, stream: str, count: int, **kwargs: object) -> None:
    async with client.producer(stream, linger_ms=1000, **kwargs) as producer:  # type: ignore[arg-type]
        for i in range(count):
            await producer.send(
                f"m{i}".encode(), key=f"k{i}".encode(), headers={"n": str(i)}, id=f"id-{i}"
            )


async def test_async_for_yields_messages_and_acks_reach_the_server(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 2)
    await _publish(client, "s", 20)
    received: list[Message] = []
    async with client.consumer("s", "sub") as consumer:
        async for message in consumer:
            received.append(message)
            consumer.ack(message)
            if len(received) == 20:
                break
        await gateway.wait_for(
            lambda: sum(len(gateway.acked("s", "sub", p)) for p in range(2)) == 20
        )
    by_payload = {m.payload: m for m in received}
    assert sorted(by_payload) == sorted(f"m{i}".encode() for i in range(20))
    m3 = by_payload[b"m3"]
    assert m3.key == b"k3"
    assert m3.headers == {"n": "3"}
    assert m3.id == "id-3"
    assert m3.stream == "s"
    assert m3.delivery_count == 1
    assert m3.event_time is None
    assert m3.publish_time.tzinfo is not None
    assert abs((datetime.now(UTC) - m3.publish_time).total_seconds()) < 60
    for p in range(2):
        offsets = [m.offset for m in received if m.partition == p]
        assert offsets == list(range(len(offsets)))
        assert gateway.acked("s", "sub", p) == set(offsets)
    # Acks were coalesced into ranges, not sent one request per message.
    sub = gateway.subscriptions[("s", "sub")]
    assert len(sub.ack_requests) < 20


async def test_acks_are_coalesced_into_ranges(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    await _publish(client, "s", 10)
    async with client.consumer("s", "sub") as consumer:
        batch = await consumer.receive_batch(10, timeout_s=5)
        messages = list(batch)
        for message in messages:
            if message.offset != 5:
                consumer.ack(message)
        await consumer.flush_acks(5)
        sub = gateway.subscriptions[("s", "sub")]
        await gateway.wait_for(lambda: bool(sub.ack_requests))
    assert sub.ack_requests == [(0, [(0, 4), (6, 9)])]


async def test_ack_cumulative_acks_everything_up_to_the_message(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    await _publish(client, "s", 10)
    async with client.consumer("s", "sub") as consumer:
        last = None
        async for message in consumer:
            last = message
            if message.offset == 6:
                break
        assert last is not None
        consumer.ack_cumulative(last)
        await gateway.wait_for(lambda: gateway.acked("s", "sub", 0) == set(range(7)))
    assert gateway.subscriptions[("s", "sub")].ack_requests == [(0, [(0, 6)])]


async def test_close_sends_pending_acks(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    await _publish(client, "s", 3)
    consumer = client.consumer("s", "sub")
    await consumer.start()
    batch = await consumer.receive_batch(3, timeout_s=5)
    consumer.ack(batch)
    await consumer.close()
    # No waiting: close returns once the server has seen the acks and ended the stream.
    assert gateway.acked("s", "sub", 0) == {0, 1, 2}
    assert gateway.sessions[0].ended
    with pytest.raises(Closed):
        await consumer.receive_batch(1, timeout_s=1)
    with pytest.raises(Closed):
        consumer.ack(batch)


async def test_nack_is_not_implemented_yet(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    await _publish(client, "s", 1)
    async with client.consumer("s", "sub") as consumer:
        message = await anext(aiter(consumer))
        with pytest.raises(NotImplementedError, match="nack"):
            consumer.nack(message, delay_s=1)


async def test_credit_limits_what_the_server_sends(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    await _publish(client, "s", 100, max_batch_messages=100)
    async with client.consumer("s", "sub", credits=10) as consumer:
        await gateway.wait_for(
            lambda: bool(gateway.sessions) and gateway.sessions[0].delivered == 10
        )
        session = gateway.sessions[0]
        # Nothing taken yet: no more credit than the initial grant.
        await consumer.receive_batch(4, timeout_s=5)
        assert session.granted == 10
        # Taking half the window grants what was taken, so the server sends more.
        await consumer.receive_batch(1, timeout_s=5)
        await gateway.wait_for(lambda: session.granted == 15 and session.delivered == 15)
        taken = 5
        while taken < 100:
            batch = await consumer.receive_batch(100, timeout_s=5)
            assert len(batch) > 0
            taken += len(batch)
            # The server never has more than `credits` messages outstanding.
            assert session.granted - taken <= 10
        assert session.max_outstanding <= 10
        assert session.delivered == 100


async def test_receive_batch_is_vectorised(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    await _publish(client, "s", 100, max_batch_messages=100)
    async with client.consumer("s", "sub") as consumer:
        first = await consumer.receive_batch(30, timeout_s=5)
        assert len(first) == 30
        assert (first.partition, first.first_offset, first.last_offset) == (0, 0, 29)
        assert isinstance(first.record_batch, pa.RecordBatch)
        assert first.record_batch.column("payload").to_pylist() == [
            f"m{i}".encode() for i in range(30)
        ]
        table = first.table
        assert table.column("offset").to_pylist() == list(range(30))
        assert pc.sum(pc.binary_length(table.column("payload"))).as_py() > 0
        assert [m.offset for m in first] == list(range(30))
        assert first.publish_time.tzinfo is not None
        second = await consumer.receive_batch(1000, timeout_s=5)
        assert (second.first_offset, len(second)) == (30, 70)
        consumer.ack(first)
        consumer.ack(second)
        empty = await consumer.receive_batch(10, timeout_s=0.05)
        assert len(empty) == 0
        await gateway.wait_for(lambda: gateway.acked("s", "sub", 0) == set(range(100)))


async def test_start_positions(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    await _publish(client, "s", 10)
    async with client.consumer("s", "from-7", start=Start.offset(7)) as consumer:
        batch = await consumer.receive_batch(100, timeout_s=5)
        assert batch.first_offset == 7
    async with client.consumer("s", "latest", start=Start.latest()) as consumer:
        await gateway.wait_for(lambda: len(gateway.sessions) == 2)
        await _publish(client, "s", 1)
        batch = await consumer.receive_batch(100, timeout_s=5)
        assert (batch.first_offset, len(batch)) == (10, 1)


async def test_reconnects_and_receives_redeliveries_after_stream_drop(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    await _publish(client, "s", 10)
    async with client.consumer("s", "sub") as consumer:
        seen: list[int] = []
        iterator = aiter(consumer)
        first = await anext(iterator)
        seen.append(first.offset)
        consumer.ack(first)
        await gateway.wait_for(lambda: gateway.acked("s", "sub", 0) == {0})
        await gateway.drop_sessions()
        await gateway.wait_for(lambda: len(gateway.sessions) == 2)
        while set(seen) != set(range(10)):
            message = await asyncio.wait_for(anext(iterator), 5)
            seen.append(message.offset)
            consumer.ack(message)
        assert consumer.reconnects == 1
        await gateway.wait_for(lambda: gateway.acked("s", "sub", 0) == set(range(10)))
    assert len(gateway.sessions) == 2
    # The acked message was not redelivered; the rest came on the new stream.
    assert seen == list(range(10))


async def test_missing_stream_stops_the_consumer_with_not_found(
    client: Client, gateway: FakeGateway
) -> None:
    async with client.consumer("nope", "sub") as consumer:
        with pytest.raises(NotFound):
            await asyncio.wait_for(anext(aiter(consumer)), 5)


async def test_reconnect_reauthenticates_when_the_token_was_revoked(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    await _publish(client, "s", 3)
    async with client.consumer("s", "sub") as consumer:
        await consumer.receive_batch(1, timeout_s=5)
        gateway.revoke_tokens()
        await gateway.drop_sessions()
        await gateway.wait_for(lambda: len(gateway.sessions) == 2)
        batch = await consumer.receive_batch(10, timeout_s=5)
        assert (batch.first_offset, len(batch)) == (0, 3)
    assert gateway.auth_calls == 2
