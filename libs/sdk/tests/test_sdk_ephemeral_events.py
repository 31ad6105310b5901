"""A subscription takes several deliveries per SubscribeEphemeral event (one
gRPC message per delivery cost the gateway and the subscriber more than the rest of a
request/reply round trip) and hands them out one batch at a time, in order."""

from __future__ import annotations

from typing import Any

import grpc

from tamto_protocol.batch import encode_record_batch, make_batch
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_sdk.columns import binary_array
from tamto_sdk.ephemeral_subscription import DELIVERIES_PER_EVENT, EphemeralSubscription


def delivery(topic: str, *payloads: bytes, dropped: int = 0) -> gateway_pb2.EphemeralDelivery:
    arrow_ipc = encode_record_batch(make_batch(binary_array(list(payloads))))
    return gateway_pb2.EphemeralDelivery(
        stream="s",
        topic=topic,
        batch=messages_pb2.RecordBatch(arrow_ipc=arrow_ipc, count=len(payloads)),
        dropped=dropped,
    )


class Events:
    """A started SubscribeEphemeral call that reads `events`, then ends."""

    def __init__(self, *events: gateway_pb2.EphemeralEvent) -> None:
        self._events = list(events)
        self.reads = 0

    async def read(self) -> Any:
        self.reads += 1
        return self._events.pop(0) if self._events else grpc.aio.EOF

    def cancel(self) -> None:
        self._events.clear()


def subscription(call: Events) -> EphemeralSubscription:
    sub = EphemeralSubscription(None, "s", match="#", group="", consumer_name="")  # type: ignore[arg-type]
    sub._call = call
    return sub


def test_a_subscription_asks_for_several_deliveries_per_event() -> None:
    sub = EphemeralSubscription(None, "s", match=None, group="g", consumer_name="")  # type: ignore[arg-type]
    assert sub._request.max_deliveries_per_event == DELIVERIES_PER_EVENT > 1


async def test_the_deliveries_of_one_event_come_out_in_order_from_one_read() -> None:
    call = Events(
        gateway_pb2.EphemeralEvent(
            delivery=delivery("a", b"1", dropped=4),
            more_deliveries=[delivery("b", b"2", b"3"), delivery("c", b"4")],
        )
    )
    sub = subscription(call)
    batches = [await sub.receive_batch() for _ in range(3)]
    assert call.reads == 1
    assert [b.topic for b in batches if b is not None] == ["a", "b", "c"]
    assert [len(b) for b in batches if b is not None] == [1, 2, 1]
    assert sub.dropped == 4
    messages = subscription(
        Events(
            gateway_pb2.EphemeralEvent(
                delivery=delivery("a", b"1"), more_deliveries=[delivery("b", b"2", b"3")]
            )
        )
    )
    assert [m.payload async for m in _take(messages, 3)] == [b"1", b"2", b"3"]


async def test_closing_drops_what_was_left_of_an_event() -> None:
    sub = subscription(
        Events(
            gateway_pb2.EphemeralEvent(
                delivery=delivery("a", b"1"), more_deliveries=[delivery("b", b"2")]
            )
        )
    )
    assert (await sub.receive_batch()) is not None
    await sub.close()
    assert await sub.receive_batch() is None


async def _take(sub: EphemeralSubscription, count: int) -> Any:
    for _ in range(count):
        yield await sub.__anext__()
