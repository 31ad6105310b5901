"""Where a connection's subscriptions receive from: one source per persistent stream,
one per filter on an ephemeral stream.

- A persistent stream's filters share one consume session of a Tamto subscription
  (failover: while a client's old connection is still leaving, its new one waits on
  standby rather than being refused). A new subscription starts at the time of the
  SUBSCRIBE. The filters are applied at the gateway to each message's MQTT topic
  (its key): a message no filter matches is acked at once; one that matches goes out
  at the highest QoS of the filters matching it, never above the QoS it was
  published with (`mqtt-qos` header; 1 for messages not published over MQTT). A QoS
  0 delivery is acked when written, a QoS 1 one on the client's PUBACK, a QoS 2 one
  on its PUBREC; each ack grants the routers one more message, so a session never
  holds more than the inflight limit.
- An ephemeral stream's filters share one ephemeral subscription: a single
  filter's own pattern (`+` is `*`, `#` is `#`), or with several `#` and the
  filters matched at the gateway, so that a message matching two filters is
  delivered once. Delivered at QoS 0 (at most once is what ephemeral streams
  give).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Protocol

from tamto_gateway.http.consumers import HttpConsumer
from tamto_gateway.http.model import Position, ReceivedMessage
from tamto_gateway.mqtt.inbound import QOS_HEADER
from tamto_gateway.mqtt.topics import Address, matches
from tamto_protocol.batch import decode_batch
from tamto_protocol.v1 import gateway_pb2, messages_pb2

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tamto_gateway.mqtt.context import Identity, Shared
    from tamto_gateway.mqtt.outbound import Outbound

#: Deliveries asked for per ephemeral event.
EPHEMERAL_BATCHING = 64


class Source(Protocol):
    task: asyncio.Task[None] | None

    async def close(self) -> None: ...


class PersistentSource:
    """The filters of one connection on one persistent stream (module docstring)."""

    def __init__(
        self, shared: Shared, identity: Identity, outbound: Outbound, address: Address
    ) -> None:
        self._shared = shared
        self._identity = identity
        self._outbound = outbound
        self.prefix = address.prefix
        self.stream = address.stream
        #: Filter levels after the stream's -> granted QoS.
        self.filters: dict[tuple[str, ...], int] = {}
        self._consumer: HttpConsumer | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self, subscription: str, client_id: str) -> None:
        subscribe = messages_pb2.Subscribe(
            stream=self.stream,
            subscription=subscription,
            start=messages_pb2.StartPosition(time_us=int(time.time() * 1_000_000)),
            type=messages_pb2.SUBSCRIPTION_TYPE_FAILOVER,
            consumer_name=f"mqtt:{client_id}"[:128],
        )
        call = await self._identity.call()
        self._consumer = HttpConsumer(
            self._shared.servicer, call, subscribe, self._identity.subject
        )
        self._consumer.credit(self._shared.limits.max_inflight)
        self.task = asyncio.create_task(self._run(), name=f"mqtt-source-{self.stream}")

    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            await consumer.wait(None)
            for message in consumer.take():
                await self._deliver(consumer, message)

    async def _deliver(self, consumer: HttpConsumer, message: ReceivedMessage) -> None:
        key = None if message.key is None else message.key.decode(errors="replace")
        rule = self._shared.rule
        levels = rule.topic_levels(key)
        granted = [q for f, q in self.filters.items() if rule.matches(f, levels)]
        position = Position(message.partition, message.offset)

        def done() -> None:
            if not consumer.ended:
                consumer.ack([position])
                consumer.credit(1)

        if not granted:
            done()
            return
        qos = min(max(granted), _published_qos(message))
        topic = self._shared.rule.delivered_topic(self.prefix, key, "/")
        if qos == 0:
            await self._outbound.deliver(topic, message.payload, 0)
            done()
        else:
            await self._outbound.deliver(
                topic, message.payload, qos, dup=message.delivery_count > 1, on_ack=done
            )

    async def close(self) -> None:
        """Leave the subscription: unacked messages go back to it, and if the client
        had some unacknowledged, they count as delivered (DUP when sent again)."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self._consumer is not None:
            await self._consumer.close(clean=not self._outbound.unacknowledged)


def _published_qos(message: ReceivedMessage) -> int:
    text = message.headers.get(QOS_HEADER, "1")
    return {"0": 0, "2": 2}.get(text, 1)


class EphemeralSource:
    """The filters of one connection on an ephemeral stream (module docstring)."""

    def __init__(
        self,
        shared: Shared,
        identity: Identity,
        outbound: Outbound,
        address: Address,
        filters: set[tuple[str, ...]],
    ) -> None:
        self._shared = shared
        self._identity = identity
        self._outbound = outbound
        self._address = address
        #: The filters' levels after the stream's (fixed: a change makes a new source).
        self.filters = frozenset(filters)
        self._events: AsyncIterator[bytes] | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def _pattern(self) -> str:
        if len(self.filters) == 1:
            (levels,) = self.filters
            return ".".join("*" if w == "+" else w for w in levels)
        return "#"

    async def start(self, client_id: str) -> None:
        """Subscribe, returning once the gateway matches messages for it."""
        request = gateway_pb2.SubscribeEphemeralRequest(
            stream=self._address.stream,
            match=self._pattern,
            consumer_name=f"mqtt:{client_id}"[:128],
            max_deliveries_per_event=EPHEMERAL_BATCHING,
        )
        call = await self._identity.call()
        events = self._shared.servicer.SubscribeEphemeral(request, call)
        await anext(events)  # subscribed
        self._events = events
        self.task = asyncio.create_task(self._run(), name=f"mqtt-source-{request.stream}")

    async def _run(self) -> None:
        assert self._events is not None
        async for raw in self._events:
            event = gateway_pb2.EphemeralEvent.FromString(raw)
            for delivery in (event.delivery, *event.more_deliveries):
                levels = tuple(delivery.topic.split(".")) if delivery.topic else ()
                if not any(matches(f, levels) for f in self.filters):
                    continue
                topic = self._shared.rule.delivered_topic(self._address.prefix, delivery.topic, ".")
                payloads = decode_batch(delivery.batch.arrow_ipc).column("payload").to_pylist()
                for payload in payloads:
                    await self._outbound.deliver(topic, payload, 0)

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self._events is not None and hasattr(self._events, "aclose"):
            with contextlib.suppress(Exception):
                await self._events.aclose()
