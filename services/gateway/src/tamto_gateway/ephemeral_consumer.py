"""One ephemeral consumer's bounded buffer at its gateway, and the events it sends.

A consumer's gateway buffers the encoded deliveries (`EphemeralDelivery`, the
bytes the bus carried) for it up to the stream's `buffer_messages`; when a slow
consumer's buffer is full the stream's `overflow` drops the oldest or the newest
batches, counted in messages, so nobody else waits for it. What piles up while
one event is being sent goes out together in the next (`next_event`), up to what
the consumer asked for (`SubscribeEphemeralRequest.max_deliveries_per_event`).
Events are written in wire form (`delivery_event`, `encode_delivery`): the Arrow
bytes are copied once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import Counter

from tamto_gateway.topics import TopicPattern
from tamto_protocol.single_message import as_batch
from tamto_protocol.v1 import gateway_pb2
from tamto_protocol.wire import int_field, len_header

#: Deliveries go together in one event only up to this many bytes (a delivery is at
#: most a bus message, 1 MiB by default; the SDK takes gRPC messages up to 64 MiB).
EVENT_BYTES: Final = 4 << 20

DELIVERED = Counter(
    "tamto_ephemeral_delivered_messages",
    "ephemeral messages handed to this gateway's consumers",
    ["stream"],
)
DROPPED = Counter(
    "tamto_ephemeral_dropped_messages",
    "ephemeral messages dropped from a full consumer buffer",
    ["stream", "overflow"],
)


def delivery_event(delivery: bytes, dropped: int, more: Sequence[bytes] = ()) -> bytes:
    """`EphemeralEvent` {delivery = 1, more_deliveries = 3} around encoded
    `EphemeralDelivery`s, the first with its `dropped` field (6) appended: protobuf
    merges a repeated scalar field, last wins."""
    extra = int_field(6, dropped)
    pieces = [len_header(1, len(delivery) + len(extra)), delivery, extra]
    for other in more:
        pieces += [len_header(3, len(other)), other]
    return b"".join(pieces)


def encode_delivery(
    stream: str,
    topic: str,
    arrow_ipc: bytes,
    count: int,
    response_stream: str,
    publish_time_us: int,
    single: bytes = b"",
) -> bytes:
    """`EphemeralDelivery` {stream = 1, topic = 2, batch = 3 {arrow_ipc = 1, count = 2},
    response_stream = 4, publish_time_us = 5} in one join: the Arrow bytes are copied
    once (building the generated message and serialising it copies them three times).
    With `single` (an encoded `SingleMessage`): that as `message` = 7, no batch."""
    if single:
        body = [len_header(7, len(single)), single]
    else:
        batch = [len_header(1, len(arrow_ipc)) if arrow_ipc else b"", arrow_ipc]
        batch.append(int_field(2, count))
        body = [len_header(3, sum(len(p) for p in batch)), *batch]
    pieces = [
        _text_field(1, stream),
        _text_field(2, topic),
        *body,
        _text_field(4, response_stream),
        int_field(5, publish_time_us),
    ]
    return b"".join(pieces)


def batch_delivery(delivery: bytes) -> bytes:
    """An encoded `EphemeralDelivery` holding a `SingleMessage`, as one holding that
    message as a one-message batch."""
    parsed = gateway_pb2.EphemeralDelivery.FromString(delivery)
    batch = as_batch(parsed.message)
    return encode_delivery(
        parsed.stream,
        parsed.topic,
        batch.arrow_ipc,
        batch.count,
        parsed.response_stream,
        parsed.publish_time_us,
    )


def _text_field(number: int, text: str) -> bytes:
    data = text.encode()
    return len_header(number, len(data)) + data if data else b""


def subscribed_event(entity: str) -> bytes:
    return gateway_pb2.EphemeralEvent(
        subscribed=gateway_pb2.EphemeralSubscribed(entity=entity)
    ).SerializeToString()


@dataclass(eq=False)
class EphemeralConsumer:
    """One consumer's bounded buffer of encoded deliveries (see the module docstring)."""

    stream: str
    limit: int
    drop_newest: bool
    #: What it receives (a group member: its own binding of the group), and the bus
    #: filter of that pattern.
    pattern: TopicPattern = field(default_factory=lambda: TopicPattern.parse("#"))
    bus_filter: str = ""
    #: It reads a request sent as one message as one (`SingleMessage`).
    single_messages: bool = False
    _items: deque[tuple[bytes, int]] = field(default_factory=deque)
    _buffered: int = 0
    _dropped: int = 0
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def buffered(self) -> int:
        return self._buffered

    def offer(self, delivery: bytes, count: int, single: bool = False) -> None:
        """Buffer a delivery of `count` messages, dropping what the overflow policy says
        (`single`: it holds a `SingleMessage`, which a consumer that reads none gets
        as a one-message batch)."""
        if single and not self.single_messages:
            delivery = batch_delivery(delivery)
        if self._buffered + count > self.limit and self._items:
            if self.drop_newest:
                self._drop(count)
                return
            while self._items and self._buffered + count > self.limit:
                _, old = self._items.popleft()
                self._buffered -= old
                self._drop(old)
        self._items.append((delivery, count))
        self._buffered += count
        self._ready.set()

    def _drop(self, count: int) -> None:
        self._dropped += count
        DROPPED.labels(self.stream, "drop_newest" if self.drop_newest else "drop_oldest").inc(count)

    async def next_event(self, max_deliveries: int = 1) -> bytes:
        """The next `EphemeralEvent` to send (waits for one): the oldest buffered
        delivery and, up to `max_deliveries` in all, those after it. While gRPC sends
        one event deliveries pile up, so a consumer that takes several per event
        costs one message per write instead of one per delivery."""
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        taken = [self._items.popleft()]
        size = len(taken[0][0])
        while self._items and len(taken) < max_deliveries:
            size += len(self._items[0][0])
            if size > EVENT_BYTES:
                break
            taken.append(self._items.popleft())
        count = sum(c for _, c in taken)
        self._buffered -= count
        dropped, self._dropped = self._dropped, 0
        DELIVERED.labels(self.stream).inc(count)
        return delivery_event(taken[0][0], dropped, [d for d, _ in taken[1:]])
