"""EphemeralHub's local delivery: a batch published at a gateway reaches that
gateway's own consumers without the bus round trip, and every entity still gets
it once when other gateways are attached (two hubs on a real NATS, each its own
"gateway")."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient

from tamto_common.errors import NotFound
from tamto_common.streams import StreamDef
from tamto_gateway.ephemeral import COUNT_HEADER, ORIGIN_HEADER, SERVED_HEADER, EphemeralHub
from tamto_gateway.ephemeral_consumer import EphemeralConsumer, encode_delivery
from tamto_gateway.requests import RequestBroker, RequestOptions
from tamto_gateway.topics import TopicPattern
from tamto_protocol.batch import encode_record_batch, make_batch
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_sdk.columns import binary_array
from tamto_testing.waiting import eventually


def ephemeral_stream() -> StreamDef:
    return StreamDef(
        name=f"hub-{uuid.uuid4().hex[:8]}",
        partitions=1,
        kind="ephemeral",
        buffer_messages=1000,
        overflow="drop_oldest",
        request_timeout_ms=30_000,
    )


def one_message(payload: bytes) -> bytes:
    return encode_record_batch(make_batch(binary_array([payload])))


@pytest.fixture
async def hubs(nats_url: str) -> AsyncIterator[tuple[EphemeralHub, EphemeralHub]]:
    """Two gateways' hubs, each on its own bus connection."""
    async with AsyncExitStack() as stack:
        made: list[EphemeralHub] = []
        for _ in range(2):
            bus: NatsClient = await nats.connect(nats_url)
            stack.push_async_callback(bus.close)
            hub = EphemeralHub(bus)
            await hub.start()
            stack.push_async_callback(hub.close)
            made.append(hub)
        yield made[0], made[1]


async def join(
    stack: AsyncExitStack, hub: EphemeralHub, stream: StreamDef, group: str = "", match: str = "#"
) -> EphemeralConsumer:
    consumer, _ = await stack.enter_async_context(
        hub.consumer(stream, TopicPattern.parse(match), group)
    )
    return consumer


async def settled(hubs: Sequence[EphemeralHub]) -> None:
    """Every bus message published so far has been dispatched by every hub: each
    connection's PING answered, then no subscription holds an undispatched message."""
    for hub in hubs:
        await hub._bus.flush()

    def idle() -> bool:
        return all(sub.pending_msgs == 0 for hub in hubs for sub in hub._bus._subs.values())

    await eventually(idle, 10, "every bus message dispatched")


async def test_a_batch_reaches_this_gateways_consumers_without_the_bus(
    hubs: tuple[EphemeralHub, EphemeralHub], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the bus delivering anything back, the publishing gateway's plain
    consumer and group member have the batch; the bus message names its origin,
    its count and the group served here."""
    hub, _ = hubs
    stream = ephemeral_stream()
    sent: list[tuple[str, bytes, dict[str, str]]] = []

    async def publish(subject: str, payload: bytes = b"", headers: Any = None) -> None:
        sent.append((subject, payload, dict(headers or {})))

    async with AsyncExitStack() as stack:
        alone = await join(stack, hub, stream)
        member = await join(stack, hub, stream, group="billing", match="orders.*")
        monkeypatch.setattr(hub._bus, "publish", publish)  # the bus swallows it
        assert await hub.publish(stream, "orders.eu", one_message(b"x"), 1) == 2
        assert alone.buffered == 1
        assert member.buffered == 1
        (subject, _, headers) = sent[-1]
        assert subject.startswith(f"tamto.eph.{stream.name}.orders.eu")
        assert headers[ORIGIN_HEADER] == hub._id
        assert headers[COUNT_HEADER] == "1"
        assert headers[SERVED_HEADER] == "billing"


async def test_each_entity_gets_each_batch_once_with_a_second_gateway(
    hubs: tuple[EphemeralHub, EphemeralHub],
) -> None:
    """Plain consumers on both gateways, a group only on the publishing one and a
    group spread over both: each gets every batch once (the bus's echo of a batch
    delivered locally is skipped), whether or not the publishing gateway has heard
    of the other's members yet."""
    one, two = hubs
    stream = ephemeral_stream()
    count = 40
    async with AsyncExitStack() as stack:
        alone_one = await join(stack, one, stream)
        alone_two = await join(stack, two, stream)
        solo = await join(stack, one, stream, group="solo")
        spread = [
            await join(stack, one, stream, group="spread"),
            await join(stack, two, stream, group="spread"),
        ]
        for i in range(count // 2):
            await one.publish(stream, "t", one_message(b"%d" % i), 1)
        # From here on gateway one knows the spread group has a member on two.
        await eventually(
            lambda: one._remote.has((stream.name, "spread", "")), 10, "gateway two's members"
        )
        for i in range(count // 2, count):
            await one.publish(stream, "t", one_message(b"%d" % i), 1)

        # Each entity has every batch: waited for (a batch the bus hands gateway two may
        # still be on its way when both connections' PINGs came back), then checked
        # once more after the bus settled, so a batch delivered twice is seen too.
        def all_have_every_batch() -> bool:
            counts = [alone_one, alone_two, solo]
            return all(c.buffered >= count for c in counts) and (
                sum(m.buffered for m in spread) >= count
            )

        await eventually(all_have_every_batch, 10, "every entity's 40 batches")
        await settled(hubs)
        assert alone_one.buffered == count
        assert alone_two.buffered == count
        assert solo.buffered == count
        assert sum(m.buffered for m in spread) == count


async def test_a_group_with_several_bindings_gets_a_batch_once(
    hubs: tuple[EphemeralHub, EphemeralHub],
) -> None:
    """A group is a queue: its members' patterns are its bindings, on one gateway or
    two, and a batch matching several of them reaches one member, whose own
    pattern matches it; one matching none of them reaches nobody."""
    one, two = hubs
    stream = ephemeral_stream()
    async with AsyncExitStack() as stack:
        eu_here = await join(stack, one, stream, group="g", match="orders.eu")
        orders_here = await join(stack, one, stream, group="g", match="orders.*")
        everything_there = await join(stack, two, stream, group="g", match="#")
        await eventually(lambda: one._remote.has((stream.name, "g", "")), 10, "two's member")
        topics = ["orders.eu"] * 20 + ["orders.us"] * 10 + ["audit"] * 5
        for i, topic in enumerate(topics):
            await one.publish(stream, topic, one_message(b"%d" % i), 1)
        members = (eu_here, orders_here, everything_there)
        # Every batch arrived (waited for: the settle check can pass while the bus is
        # still handing gateway two its share), then nothing more after the bus settled.
        await eventually(lambda: sum(c.buffered for c in members) >= len(topics), 10, "every batch")
        await settled([one, two])
        assert one.matching_entities(stream.name, "orders.eu") == 1
        taken = {
            id(c): [
                gateway_pb2.EphemeralEvent.FromString(await c.next_event()).delivery.topic
                for _ in range(c.buffered)
            ]
            for c in members
        }
    assert sum(len(t) for t in taken.values()) == len(topics)  # each once
    assert set(taken[id(eu_here)]) <= {"orders.eu"}
    assert set(taken[id(orders_here)]) <= {"orders.eu", "orders.us"}
    assert taken[id(everything_there)].count("audit") == 5  # only its binding takes it


@pytest.mark.parametrize(
    ("topic", "response_stream", "arrow_ipc"),
    [("orders.eu", "", b"x" * 300), ("", "reply-abc", b"y"), ("a..b", "r", b"")],
)
def test_encode_delivery_writes_what_the_generated_message_does(
    topic: str, response_stream: str, arrow_ipc: bytes
) -> None:
    expected = gateway_pb2.EphemeralDelivery(
        stream="s.1",
        topic=topic,
        batch=messages_pb2.RecordBatch(arrow_ipc=arrow_ipc, count=3),
        response_stream=response_stream,
        publish_time_us=1_764_000_000_000_000,
    ).SerializeToString()
    assert (
        encode_delivery("s.1", topic, arrow_ipc, 3, response_stream, 1_764_000_000_000_000)
        == expected
    )


async def test_a_reply_at_the_requesters_gateway_skips_the_bus(
    hubs: tuple[EphemeralHub, EphemeralHub], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request and its replier on one gateway: the request reaches the replier
    (a group member) and the reply the requester with the bus's request/reply
    unavailable; a second reply to the same response stream is NOT_FOUND."""
    hub, _ = hubs
    broker = RequestBroker(hub._bus, None, hub)  # no etcd: generated names only
    stream = ephemeral_stream()

    async def no_bus_request(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the reply went over the bus")

    monkeypatch.setattr(hub._bus, "request", no_bus_request)
    try:
        async with hub.consumer(stream, TopicPattern.parse("rpc"), "echo") as (replier, _):
            asking = asyncio.create_task(
                broker.request(
                    stream, "rpc", one_message(b"ping"), 1, RequestOptions(timeout_ms=5_000)
                )
            )
            event = gateway_pb2.EphemeralEvent.FromString(
                await asyncio.wait_for(replier.next_event(), 10)
            )
            name = event.delivery.response_stream
            reply = gateway_pb2.ReplyRequest(
                response_stream=name,
                batch=messages_pb2.RecordBatch(arrow_ipc=one_message(b"pong"), count=1),
            )
            await broker.reply(reply)
            answered, replies = await asyncio.wait_for(asking, 10)
            assert answered == name
            assert [r.batch.arrow_ipc for r in replies] == [reply.batch.arrow_ipc]
            with pytest.raises(NotFound, match="does not exist or has expired"):
                await broker.reply(reply)
    finally:
        await broker.close()


def delivery(index: int, size: int = 10) -> bytes:
    return encode_delivery("s", f"t.{index}", bytes(size), 1, "", index)


async def test_an_event_carries_the_buffered_deliveries_in_order_up_to_the_limit() -> None:
    """One SubscribeEphemeral message carries what piled up while the
    previous one was sent, up to the subscriber's limit, the drops on the first."""
    consumer = EphemeralConsumer("s", limit=3, drop_newest=False)
    for index in range(5):  # two dropped (oldest), three left
        consumer.offer(delivery(index), 1)
    event = gateway_pb2.EphemeralEvent.FromString(await consumer.next_event(2))
    assert [d.topic for d in [event.delivery, *event.more_deliveries]] == ["t.2", "t.3"]
    assert event.delivery.dropped == 2
    assert consumer.buffered == 1
    single = gateway_pb2.EphemeralEvent.FromString(await consumer.next_event())
    assert single.delivery.topic == "t.4"
    assert not single.more_deliveries
    assert single.delivery.dropped == 0


async def test_an_event_stops_short_of_the_byte_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tamto_gateway.ephemeral_consumer.EVENT_BYTES", 2500)
    consumer = EphemeralConsumer("s", limit=100, drop_newest=False)
    for index in range(4):
        consumer.offer(delivery(index, 1000), 1)
    sizes = []
    while consumer.buffered:
        event = gateway_pb2.EphemeralEvent.FromString(await consumer.next_event(64))
        sizes.append(1 + len(event.more_deliveries))
    assert sizes == [2, 2]
