from __future__ import annotations

import asyncio
import dataclasses
import math
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from sdk_fake_gateway import API_KEY, FAST, FakeGateway

from tamto_protocol.v1 import messages_pb2
from tamto_sdk import (
    Client,
    Consumer,
    Message,
    MessageBatch,
    Start,
    SubscriptionType,
    connect,
    credit_window,
)
from tamto_sdk.errors import Closed, InvalidArgument, NotFound


async def _publish(client: Client, stream: str, count: int, **kwargs: object) -> None:
    async with client.producer(stream, linger_s=1.0, **kwargs) as producer:  # type: ignore[arg-type]
        for i in range(count):
            await producer.send(
                f"m{i}".encode(), key=f"k{i}".encode(), headers={"n": str(i)}, id=f"id-{i}"
            )


async def _filled(
    client: Client, gateway: FakeGateway, count: int, partitions: int = 1, **kwargs: object
) -> None:
    """The fake's stream "s" with `partitions`, `count` messages published to it."""
    gateway.add_stream("s", partitions)
    await _publish(client, "s", count, **kwargs)


async def _started(client: Client, gateway: FakeGateway, count: int) -> Consumer:
    """A started consumer of "s" on the subscription "sub", `count` messages on "s"."""
    await _filled(client, gateway, count)
    consumer = client.consumer("s", "sub")
    await consumer.start()
    return consumer


async def test_async_for_yields_messages_and_acks_reach_the_server(
    client: Client, gateway: FakeGateway
) -> None:
    await _filled(client, gateway, 20, partitions=2)
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
    await _filled(client, gateway, 10)
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
    await _filled(client, gateway, 10)
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
    consumer = await _started(client, gateway, 3)
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


async def test_close_waits_for_acks_the_writer_is_still_writing(
    client: Client, gateway: FakeGateway
) -> None:
    consumer = await _started(client, gateway, 3)
    batch = await consumer.receive_batch(3, timeout_s=5)
    call = consumer._call
    write = call.write

    async def slow_write(request: object) -> None:
        await asyncio.sleep(0.3)
        await write(request)

    call.write = slow_write  # the acks are taken, and still on their way, when close starts
    consumer.ack(batch)
    await asyncio.sleep(0.1)
    await consumer.close()
    assert gateway.acked("s", "sub", 0) == {0, 1, 2}


async def test_subscription_type_and_consumer_name_reach_the_server(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    async with client.consumer("s", "default") as consumer:
        assert consumer.subscription_type is SubscriptionType.EXCLUSIVE
        assert consumer.consumer_name is None
        await gateway.wait_for(lambda: len(gateway.sessions) == 1)
    async with client.consumer(
        "s", "shared", subscription_type=SubscriptionType.SHARED, consumer_name="worker-1"
    ) as consumer:
        assert consumer.subscription_type is SubscriptionType.SHARED
        assert consumer.consumer_name == "worker-1"
        await gateway.wait_for(lambda: len(gateway.sessions) == 2)
    async with client.consumer("s", "failover", subscription_type=SubscriptionType.FAILOVER):
        await gateway.wait_for(lambda: len(gateway.sessions) == 3)
    sent = [(s.subscription, s.type, s.consumer_name) for s in gateway.sessions]
    assert sent == [
        ("default", messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE, ""),
        ("shared", messages_pb2.SUBSCRIPTION_TYPE_SHARED, "worker-1"),
        ("failover", messages_pb2.SUBSCRIPTION_TYPE_FAILOVER, ""),
    ]


async def test_subscription_type_must_be_the_enum(client: Client) -> None:
    with pytest.raises(TypeError, match="SubscriptionType"):
        client.consumer("s", "sub", subscription_type="shared")  # type: ignore[arg-type]


async def test_start_time_sends_microseconds_and_starts_there(
    client: Client, gateway: FakeGateway
) -> None:
    await _filled(client, gateway, 3)
    await _publish(client, "s", 2)
    first, second = gateway.logs[("s", 0)]
    first.publish_time_us = 1_700_000_000_000_000
    second.publish_time_us = 1_700_000_010_000_000
    # 1_700_000_005.000_123 s since the epoch, given in UTC+2.
    moment = datetime(2023, 11, 15, 0, 13, 25, 123, tzinfo=timezone(timedelta(hours=2)))
    async with client.consumer("s", "sub", start=Start.time(moment)) as consumer:
        batch = await consumer.receive_batch(100, timeout_s=5)
        assert (batch.first_offset, len(batch)) == (3, 2)
    assert gateway.sessions[0].start.WhichOneof("position") == "time_us"
    assert gateway.sessions[0].start.time_us == 1_700_000_005_000_123


def test_start_time_needs_an_aware_datetime() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Start.time(datetime(2024, 1, 1))
    assert Start.time(datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)).time_us == 1_000_000


@pytest.mark.parametrize(("sent", "seen"), [(3, 3), (0, 1)])
async def test_delivery_count_surfaces(
    client: Client, gateway: FakeGateway, sent: int, seen: int
) -> None:
    gateway.add_stream("s", 1)
    gateway.delivery_count = sent  # 0: a server that predates delivery counts
    await _publish(client, "s", 4)
    async with client.consumer("s", "sub") as consumer:
        message = await anext(aiter(consumer))
        assert message.delivery_count == seen
        batch = await consumer.receive_batch(10, timeout_s=5)
        assert (batch.first_offset, len(batch)) == (1, 3)
        assert batch.delivery_count == seen
        assert {m.delivery_count for m in batch} == {seen}


async def test_nack_sends_merged_ranges_and_delay(client: Client, gateway: FakeGateway) -> None:
    await _filled(client, gateway, 10)
    async with client.consumer("s", "sub") as consumer:
        messages = list(await consumer.receive_batch(10, timeout_s=5))
        for offset in (4, 2, 3, 7):
            consumer.nack(messages[offset], delay_s=1.5)
        consumer.nack(messages[9], delay_s=0.25)
        sub = gateway.subscriptions[("s", "sub")]
        await gateway.wait_for(lambda: len(sub.nack_requests) == 2)
    assert sorted(sub.nack_requests) == [(0, [(2, 4), (7, 7)], 1500), (0, [(9, 9)], 250)]
    assert sub.ack_requests == []


async def test_nack_redelivers_with_a_higher_delivery_count(
    client: Client, gateway: FakeGateway
) -> None:
    await _filled(client, gateway, 3)
    async with client.consumer("s", "sub") as consumer:
        iterator = aiter(consumer)
        first = [await anext(iterator) for _ in range(3)]
        assert [m.delivery_count for m in first] == [1, 1, 1]
        consumer.ack(first[0])
        consumer.nack(first[1])
        consumer.ack(first[2])
        again = await asyncio.wait_for(anext(iterator), 5)
        assert (again.offset, again.payload, again.delivery_count) == (1, b"m1", 2)
        consumer.ack(again)
        await gateway.wait_for(lambda: gateway.acked("s", "sub", 0) == {0, 1, 2})
    assert gateway.subscriptions[("s", "sub")].nack_requests == [(0, [(1, 1)], 0)]


async def test_nack_of_a_batch(client: Client, gateway: FakeGateway) -> None:
    await _filled(client, gateway, 5)
    async with client.consumer("s", "sub") as consumer:
        batch = await consumer.receive_batch(10, timeout_s=5)
        assert len(batch) == 5
        consumer.nack(MessageBatch.empty("s"))  # nothing to nack
        consumer.nack(batch)
        redelivered: list[Message] = []
        while len(redelivered) < 5:
            redelivered.extend(await consumer.receive_batch(10, timeout_s=5))
        assert [(m.offset, m.delivery_count) for m in redelivered] == [(o, 2) for o in range(5)]
    assert gateway.subscriptions[("s", "sub")].nack_requests == [(0, [(0, 4)], 0)]


async def test_nack_does_not_wait_for_the_ack_linger(gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    options = dataclasses.replace(FAST, ack_linger_s=60)
    async with connect(gateway.url, api_key=API_KEY, options=options) as client:
        await _publish(client, "s", 2)
        async with client.consumer("s", "sub") as consumer:
            batch = await consumer.receive_batch(2, timeout_s=5)
            first, second = list(batch)
            consumer.ack(first)
            # A real round trip lets the writer start its 60 s linger for the ack.
            await client.streams.describe("s")
            consumer.nack(second, delay_s=30)
            sub = gateway.subscriptions[("s", "sub")]
            # Both arrive well within the 60 s linger: the nack cuts it short.
            await gateway.wait_for(lambda: bool(sub.nack_requests and sub.ack_requests))
    assert sub.ack_requests == [(0, [(0, 0)])]
    assert sub.nack_requests == [(0, [(1, 1)], 30_000)]


async def test_ack_cumulative_covers_previously_nacked_messages(
    client: Client, gateway: FakeGateway
) -> None:
    await _filled(client, gateway, 5)
    async with client.consumer("s", "sub") as consumer:
        messages = list(await consumer.receive_batch(5, timeout_s=5))
        consumer.nack(messages[1], delay_s=10)  # the fake only records delayed nacks
        consumer.ack_cumulative(messages[3])
        await gateway.wait_for(lambda: gateway.acked("s", "sub", 0) == {0, 1, 2, 3})


async def test_nack_validates_and_raises_closed_after_close(
    client: Client, gateway: FakeGateway
) -> None:
    consumer = await _started(client, gateway, 1)
    message = await anext(aiter(consumer))
    for bad in (-1.0, math.nan, math.inf, 5e6):
        with pytest.raises(ValueError, match="delay_s"):
            consumer.nack(message, delay_s=bad)
    with pytest.raises(InvalidArgument):
        consumer.nack(dataclasses.replace(message, stream="other"))
    await consumer.close()
    with pytest.raises(Closed):
        consumer.nack(message)
    with pytest.raises(Closed):
        consumer.nack(MessageBatch.empty("s"))
    assert gateway.subscriptions[("s", "sub")].nack_requests == []


async def test_credit_limits_what_the_server_sends(client: Client, gateway: FakeGateway) -> None:
    await _filled(client, gateway, 100, max_batch_messages=100)
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


async def test_acks_flushed_before_credit_is_due_carry_no_credit(
    client: Client, gateway: FakeGateway
) -> None:
    await _filled(client, gateway, 20, max_batch_messages=20)
    async with client.consumer("s", "sub", credits=10) as consumer:
        await gateway.wait_for(lambda: bool(gateway.sessions))
        session = gateway.sessions[0]
        batch = await consumer.receive_batch(2, timeout_s=5)
        consumer.ack(batch)
        await consumer.flush_acks(timeout_s=5)
        acked = gateway.subscriptions[("s", "sub")].acked
        await gateway.wait_for(lambda: acked.get(0) == {0, 1})
        # Each credit is a message of its own through gateway and router: it goes
        # once half the window is taken, not with every ack flush.
        assert session.granted == 10
        consumer.ack(await consumer.receive_batch(3, timeout_s=5))
        await gateway.wait_for(lambda: session.granted == 15)


async def test_receive_batch_is_vectorised(client: Client, gateway: FakeGateway) -> None:
    await _filled(client, gateway, 100, max_batch_messages=100)
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
    await _filled(client, gateway, 10)
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
    await _filled(client, gateway, 10)
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


async def test_every_session_of_a_consumer_carries_its_one_consumer_id(
    client: Client, gateway: FakeGateway
) -> None:
    """A consumer subscribes again under the id it had (a router still holding its
    earlier session lets the new one take its place); another consumer has its own."""
    await _filled(client, gateway, 1)
    async with client.consumer("s", "sub"), client.consumer("s", "other"):
        await gateway.wait_for(lambda: len(gateway.sessions) == 2)
        await gateway.drop_sessions()
        await gateway.wait_for(lambda: len(gateway.sessions) == 4)
    ids: dict[str, set[str]] = {}
    for session in gateway.sessions:
        ids.setdefault(session.subscription, set()).add(session.consumer_id)
    (mine,), (theirs,) = ids["sub"], ids["other"]
    assert mine, "the consumer sent no id"
    assert theirs, "the other consumer sent no id"
    assert mine != theirs


async def test_missing_stream_stops_the_consumer_with_not_found(
    client: Client, gateway: FakeGateway
) -> None:
    async with client.consumer("nope", "sub") as consumer:
        with pytest.raises(NotFound):
            await asyncio.wait_for(anext(aiter(consumer)), 5)


async def test_reconnect_reauthenticates_when_the_token_was_revoked(
    client: Client, gateway: FakeGateway
) -> None:
    await _filled(client, gateway, 3)
    async with client.consumer("s", "sub") as consumer:
        await consumer.receive_batch(1, timeout_s=5)
        gateway.revoke_tokens()
        await gateway.drop_sessions()
        await gateway.wait_for(lambda: len(gateway.sessions) == 2)
        batch = await consumer.receive_batch(10, timeout_s=5)
        assert (batch.first_offset, len(batch)) == (0, 3)
    assert gateway.auth_calls == 2


async def test_a_default_window_grows_while_it_is_the_limit(
    client: Client, gateway: FakeGateway
) -> None:
    """Without `credits`, draining a backlog message by message: the application keeps
    finding its buffer empty after a whole window came, so the window (1,000 to start)
    grows within its limit; every message comes once, in order."""
    await _filled(client, gateway, 20_000, max_batch_messages=1000)
    seen: list[int] = []
    async with client.consumer("s", "sub") as consumer:
        async for message in consumer:
            seen.append(message.offset)
            consumer.ack(message)
            if len(seen) == 20_000:
                break
        session = gateway.sessions[0]
        assert credit_window.START < session.max_outstanding <= credit_window.MOST
    assert seen == list(range(20_000))


async def test_a_trickle_or_a_set_window_keeps_its_size(
    client: Client, gateway: FakeGateway
) -> None:
    """A consumer that keeps up with traffic that pauses before a window's worth came
    keeps the default window, so an idle consumer of a shared subscription does not take
    a later burst from the others; a window set with `credits` never grows."""
    gateway.add_stream("s", 1)
    async with (
        client.producer("s") as producer,
        client.consumer("s", "trickle") as trickle,
        client.consumer("s", "set", credits=200) as fixed,
    ):
        for round_ in range(25):
            batch = [f"t{round_}-{i}".encode() for i in range(50)]
            await (await producer.send_batch(batch))
            for consumer in (trickle, fixed):
                taken = 0
                while taken < 50:
                    got = await consumer.receive_batch(50 - taken, timeout_s=5)
                    assert len(got) > 0, f"round {round_}: only {taken} of 50 came"
                    consumer.ack(got)
                    taken += len(got)
            # The traffic pauses (what is tested, not a wait for something).
            await asyncio.sleep(2 * credit_window.PAUSE_S)
        sessions = {s.subscription: s for s in gateway.sessions}
        assert sessions["trickle"].max_outstanding <= credit_window.START
        assert sessions["set"].max_outstanding <= 200
        assert sessions["trickle"].granted > credit_window.START  # credit kept coming
