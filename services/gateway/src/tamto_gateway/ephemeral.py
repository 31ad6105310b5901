"""Ephemeral streams at a gateway: topic-routed, at-most-once, never stored.

A published batch (one topic for all its messages) goes on the internal bus
(NATS) as one message, on the subject `tamto_gateway.topics.bus_subject` names.
Every gateway subscribes only as narrowly as its consumers' patterns allow
(`TopicPattern.bus_filter`) and decides exactly, per batch, with the pattern
itself. What the bus carries is an encoded `EphemeralDelivery`; the gateway
forwards those bytes to its consumers as they are (`delivery_event`).

The publishing gateway hands a batch to its own matching entities at once,
without the bus round trip (`_deliver_here`): every plain consumer, and each
group it knows no member of on another gateway. The bus message still goes out
for the other gateways, with headers naming its origin and the groups already
served; the origin's own subscriptions skip it for plain consumers, and every
gateway skips it for a served group, so each entity still gets a batch once
whatever the announcements said when it was published. A group with members on
several gateways is left to the bus's queue group, which balances it across them.

Entities: a consumer without a group is an entity of its own (one bus
subscription per distinct filter on this gateway, shared by its consumers); a
group is an entity per (stream, group), a queue in RabbitMQ's sense whose
bindings are its members' patterns. Its gateways join one NATS queue group with
each distinct filter of their members' patterns, so a batch matching several
bindings still reaches one subscription of one gateway, which gives it to one
of its live members whose pattern matches it. A member that leaves stops
receiving at once; nothing is redelivered.

Each consumer has a bounded buffer (`tamto_gateway.ephemeral_consumer`).

A batch no entity matches is counted as unmatched at the publishing gateway.
Gateways announce their entities on the bus (`tamto.eph-interest`) on every
change and every `ANNOUNCE_S`, so the count covers the whole cluster (up to an
announcement's delay after a consumer comes or goes).

This module is the hub: publishing, the bus subscriptions and routing a batch to
an entity. The entities themselves are `tamto_gateway.ephemeral_entity`; what
other gateways announced is `tamto_gateway.ephemeral_interest`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Final

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import Counter

from tamto_common.errors import InvalidArgument, Unavailable
from tamto_common.streams import StreamDef
from tamto_gateway.ephemeral_consumer import (
    EphemeralConsumer,
    encode_delivery,
)
from tamto_gateway.ephemeral_entity import Entity, EntityKey, interest_of
from tamto_gateway.ephemeral_interest import (
    ANNOUNCE_S,
    INTEREST_SUBJECT,
    RemoteInterest,
    encode_announcement,
)
from tamto_gateway.topics import TopicPattern, bus_subject, stream_token, topic_of_subject
from tamto_protocol.batch import slice_batch
from tamto_protocol.single_message import as_batch
from tamto_protocol.v1 import gateway_pb2

log = structlog.get_logger(__name__)

#: Room left in a bus message for the `EphemeralDelivery` around the Arrow bytes
#: (names, topic and numbers: topics and names are at most a few hundred bytes).
_ENVELOPE_BYTES: Final = 4096
#: Bus message headers: the publishing gateway's id, the batch's message count (so a
#: receiver need not parse the delivery) and the groups served at the origin
#: (comma separated: not legal in a group name).
ORIGIN_HEADER: Final = "Tamto-Origin"
COUNT_HEADER: Final = "Tamto-Count"
SERVED_HEADER: Final = "Tamto-Served"
#: A bus message whose delivery holds one message as a `SingleMessage`, not a batch.
SINGLE_HEADER: Final = "Tamto-Single"
#: A batch a gateway hands to another for a group (`_forward`) travels on the
#: receiver's own subject, with headers naming the stream, the topic and the group.
DIRECT_PREFIX: Final = "tamto.eph-direct"
STREAM_HEADER: Final = "Tamto-Stream"
TOPIC_HEADER: Final = "Tamto-Topic"
GROUP_HEADER: Final = "Tamto-Group"

PUBLISHED = Counter(
    "tamto_ephemeral_published_messages",
    "messages published to an ephemeral stream at this gateway",
    ["stream"],
)
UNMATCHED = Counter(
    "tamto_ephemeral_unmatched_messages",
    "ephemeral messages no consuming entity matched when published (dropped)",
    ["stream"],
)


class EphemeralHub:
    """This gateway's ephemeral consumers, their bus subscriptions, and publishing."""

    def __init__(self, bus: NatsClient) -> None:
        self._bus = bus
        self._id = uuid.uuid4().hex
        # Plain consumers: one entry per (stream, "", pattern); the bus subscription is
        # per filter, shared by entries whose patterns narrow to the same filter.
        self._entities: dict[EntityKey, Entity] = {}
        self._filters: dict[tuple[str, str], tuple[Subscription, list[Entity]]] = {}
        # Other gateways' entities, as they announced them.
        self._remote = RemoteInterest(self._id)
        self._interest_sub: Subscription | None = None
        self._interest_drained = asyncio.Event()
        self._direct_sub: Subscription | None = None
        self._announcer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self._interest_sub = await self._bus.subscribe(INTEREST_SUBJECT, cb=self._on_interest)
        self._direct_sub = await self._bus.subscribe(
            f"{DIRECT_PREFIX}.{self._id}", cb=self._on_direct
        )
        self._announcer = asyncio.create_task(self._announce_forever(), name="eph-announce")

    async def close(self) -> None:
        if self._announcer is not None:
            self._announcer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._announcer
        subs = [s for e in self._entities.values() for s in e.subscriptions.values()]
        subs += [sub for sub, _ in self._filters.values()]
        for sub in [self._interest_sub, self._direct_sub, *subs]:
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    # -- publishing -----------------------------------------------------------------

    async def publish(
        self,
        stream: StreamDef,
        topic: str,
        arrow_ipc: bytes,
        count: int,
        response_stream: str = "",
        single: gateway_pb2.SingleMessage | None = None,
    ) -> int:
        """Put one batch on the bus; returns how many entities known here match it
        (0: counted as unmatched). `topic` must have been checked.

        `single`: one message as a `SingleMessage` instead of the batch. It travels
        so (header `SINGLE_HEADER`) unless another gateway announced a consumer of
        the stream: then as a batch, which every gateway version reads. A consumer
        that reads no single messages gets it as a batch (`EphemeralConsumer.offer`).

        A batch larger than the bus takes in one message (NATS's max_payload, 1 MiB
        by default) travels as several slices; a single message that large is
        refused with INVALID_ARGUMENT.
        """
        subject = bus_subject(stream.name, topic)
        publish_time_us = time.time_ns() // 1000
        alone = single is not None and not self._remote.announced_elsewhere(stream.name)
        if single is not None:
            arrow_ipc, count = b"", 1
            if not alone:
                arrow_ipc = as_batch(single).arrow_ipc
        body = single.SerializeToString() if alone and single is not None else arrow_ipc
        for piece, piece_count in self._pieces(body, count):
            delivery = encode_delivery(
                stream.name,
                topic,
                b"" if alone else piece,
                piece_count,
                response_stream,
                publish_time_us,
                piece if alone else b"",
            )
            headers = {ORIGIN_HEADER: self._id, COUNT_HEADER: str(piece_count)}
            if alone:
                headers[SINGLE_HEADER] = "1"
            served = self._deliver_here(stream.name, topic, delivery, piece_count, alone)
            if served:
                headers[SERVED_HEADER] = ",".join(served)
            await self._bus.publish(subject, delivery, headers=headers)
        PUBLISHED.labels(stream.name).inc(count)
        matched = self.matching_entities(stream.name, topic)
        if matched == 0:
            UNMATCHED.labels(stream.name).inc(count)
        return matched

    def _pieces(self, arrow_ipc: bytes, count: int) -> list[tuple[bytes, int]]:
        """The batch, or slices of it that each fit in one bus message."""
        limit = self._bus.max_payload - _ENVELOPE_BYTES
        if len(arrow_ipc) <= limit:
            return [(arrow_ipc, count)]
        if count == 1:
            raise InvalidArgument(
                f"an ephemeral message of {len(arrow_ipc)} bytes (encoded) exceeds what the "
                f"bus carries in one message ({limit} bytes)"
            )
        half = count // 2
        return [
            *self._pieces(slice_batch(arrow_ipc, 0, half), half),
            *self._pieces(slice_batch(arrow_ipc, half, count - half), count - half),
        ]

    def _deliver_here(
        self, stream: str, topic: str, delivery: bytes, count: int, single: bool
    ) -> list[str]:
        """Give a batch published at this gateway to its matching entities here: every
        plain consumer, and each group with no member known on another gateway
        (`single`: the delivery holds a `SingleMessage`). Returns the groups served,
        for the bus message's header."""
        served: list[str] = []
        for (entity_stream, group, _), entity in self._entities.items():
            if entity_stream != stream or not entity.members or not entity.matches(topic):
                continue
            if group:
                if self._remote.has(entity.key):
                    continue  # the bus's queue group balances it across gateways
                served.append(group)
            member = entity.pick(topic)
            if member is not None:
                member.offer(delivery, count, single)
        return served

    def matching_entities(self, stream: str, topic: str) -> int:
        """Entities (here and announced by other gateways) that a batch of `topic`
        reaches: each plain consumer whose pattern matches, each group once if any of
        its members' patterns (on any gateway) does."""
        entities: set[EntityKey] = set()
        for key, entity in self._entities.items():
            if key[0] == stream and entity.members and entity.matches(topic):
                entities.add(key)  # a plain consumer's key ends in its own uuid
        self._remote.add_matching(entities, stream, topic)
        return len(entities)

    async def matching_everywhere(self, stream: str, topic: str) -> int:
        """`matching_entities` once every announcement the bus holds for this gateway
        was taken in: a consumer whose gateway answered its subscription before this
        call is counted (its gateway announced and flushed first, and the bus's
        answer to this gateway's PING follows what it forwarded before)."""
        await self._bus.flush(timeout=5)
        sub = self._interest_sub
        if sub is not None and sub.pending_msgs:
            self._interest_drained.clear()  # the callback sets it once none is pending
            await self._interest_drained.wait()
        return self.matching_entities(stream, topic)

    # -- consuming ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def consumer(
        self, stream: StreamDef, pattern: TopicPattern, group: str, single_messages: bool = False
    ) -> AsyncIterator[tuple[EphemeralConsumer, str]]:
        """A consumer of `stream` receiving what `pattern` matches, alone or as a member
        of `group` (whose bindings are its members' patterns); yields it and the
        entity's name, and removes it on exit. `single_messages`: it reads a request
        sent as one message as one (`SubscribeEphemeralRequest.single_messages`)."""
        consumer = EphemeralConsumer(
            stream.name,
            stream.buffer_messages,
            stream.overflow == "drop_newest",
            pattern,
            pattern.bus_filter(stream.name),
            single_messages,
        )
        key = (stream.name, group, "") if group else (stream.name, "", uuid.uuid4().hex)
        async with self._lock:
            entity = self._entities.get(key)
            if entity is None:
                entity = Entity(key, pattern)
                self._entities[key] = entity
            entity.members.append(consumer)
            try:
                await self._subscribe(entity, consumer.bus_filter)
            except Exception:
                await self._remove(entity, consumer)
                raise
        try:
            await self._announce()
            # The server has the subscription and the announcement once it answered a
            # PING sent after them: what any gateway publishes after this returns
            # reaches the consumer, and a request any gateway takes after it counts it
            # as a responder (`matching_everywhere`).
            await self._bus.flush(timeout=10)
        except Exception as exc:
            await self._leave(entity, consumer)
            raise Unavailable(f"the bus did not confirm the subscription: {exc}") from exc
        name = f"group {group}, binding {pattern.text!r}" if group else "consumer"
        try:
            yield consumer, name
        finally:
            await self._leave(entity, consumer)

    async def _leave(self, entity: Entity, consumer: EphemeralConsumer) -> None:
        async with self._lock:
            await self._remove(entity, consumer)
        with contextlib.suppress(Exception):
            await self._announce()

    async def _remove(self, entity: Entity, consumer: EphemeralConsumer) -> None:
        entity.members.remove(consumer)
        if not entity.members:
            del self._entities[entity.key]
        await self._unsubscribe(entity, consumer.bus_filter)

    async def _subscribe(self, entity: Entity, bus_filter: str) -> None:
        """Subscribe `entity` to `bus_filter` unless it is already. A group's gateways
        join one NATS queue group per (stream, group) with each of their members'
        filters: the bus gives a batch matching several of them to one subscription
        of the queue group, so to the group once."""
        stream, group, _ = entity.key
        if group:
            if bus_filter not in entity.subscriptions:
                queue = f"tamto.eph.{stream_token(stream)}.{group}"
                entity.subscriptions[bus_filter] = await self._bus.subscribe(
                    bus_filter, queue=queue, cb=self._dispatcher([entity], bus_filter)
                )
            return
        shared = self._filters.get((stream, bus_filter))
        if shared is None:
            entities = [entity]
            sub = await self._bus.subscribe(bus_filter, cb=self._dispatcher(entities))
            self._filters[(stream, bus_filter)] = (sub, entities)
        else:
            shared[1].append(entity)

    async def _unsubscribe(self, entity: Entity, bus_filter: str) -> None:
        """Undo `_subscribe` for a member of `entity` with `bus_filter` that left."""
        if entity.group:
            if any(m.bus_filter == bus_filter for m in entity.members):
                return
            sub = entity.subscriptions.pop(bus_filter, None)
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            return
        filter_key = (entity.key[0], bus_filter)
        sub, entities = self._filters[filter_key]
        entities.remove(entity)
        if not entities:
            del self._filters[filter_key]
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    def _dispatcher(
        self, entities: list[Entity], bus_filter: str = ""
    ) -> Callable[[Msg], asyncio.Future[None]]:
        """The callback of a bus subscription feeding `entities` (a group's: the one
        group, and the filter of the subscription)."""

        async def dispatch(msg: Msg) -> None:
            topic = topic_of_subject(msg.subject)
            data = msg.data
            headers = msg.headers or {}
            mine = headers.get(ORIGIN_HEADER) == self._id
            single = headers.get(SINGLE_HEADER) == "1"
            served: set[str] | None = None
            count = 0
            for entity in entities:
                group = entity.group
                if group:
                    if served is None:
                        served = set(headers.get(SERVED_HEADER, "").split(","))
                    if group in served:
                        continue  # its origin gave it to a member already
                elif mine:
                    continue  # delivered when it was published here (`_deliver_here`)
                member = entity.pick(topic, bus_filter)
                if member is None:
                    if group:
                        await self._forward(entity.key, topic, data, headers)
                    continue
                if not count:
                    count = _batch_count(data, headers)
                member.offer(data, count, single)

        return dispatch  # type: ignore[return-value]

    async def _forward(
        self, key: EntityKey, topic: str, data: bytes, headers: dict[str, str]
    ) -> None:
        """A group's batch the bus gave this gateway, whose members' patterns do not
        match its topic: a filter is broader than its pattern when a `#` has words
        after it (`#.refunds` subscribes to the whole stream), and the queue group
        picked this gateway's subscription though a member elsewhere matches. Hand it
        to a gateway that announced a member of the group whose pattern matches."""
        stream, group, _ = key
        gateway = self._remote.gateway_for(key, topic)
        if gateway is not None:
            forwarded = {
                **headers,
                STREAM_HEADER: stream,
                TOPIC_HEADER: topic,
                GROUP_HEADER: group,
            }
            await self._bus.publish(f"{DIRECT_PREFIX}.{gateway}", data, headers=forwarded)

    async def _on_direct(self, msg: Msg) -> None:
        """A group's batch another gateway handed here (`_forward`): to a member."""
        headers = msg.headers or {}
        entity = self._entities.get(
            (headers.get(STREAM_HEADER, ""), headers.get(GROUP_HEADER, ""), "")
        )
        topic = headers.get(TOPIC_HEADER, "")
        member = entity.pick(topic) if entity is not None and entity.group else None
        if member is not None:
            single = headers.get(SINGLE_HEADER) == "1"
            member.offer(msg.data, _batch_count(msg.data, headers), single)

    # -- interest announcements -----------------------------------------------------

    async def _announce(self) -> None:
        body = encode_announcement(self._id, interest_of(self._entities))
        await self._bus.publish(INTEREST_SUBJECT, body)

    async def _announce_forever(self) -> None:
        while True:
            await asyncio.sleep(ANNOUNCE_S)
            try:
                await self._announce()
            except Exception as exc:
                log.warning("ephemeral interest not announced", error=str(exc))

    async def _on_interest(self, msg: Msg) -> None:
        self._remote.take(msg)
        if self._interest_sub is None or not self._interest_sub.pending_msgs:
            self._interest_drained.set()


def _batch_count(delivery: bytes, headers: dict[str, str]) -> int:
    """The message count of a bus message: its header, else (a message without it)
    parsed from the encoded `EphemeralDelivery`."""
    if COUNT_HEADER in headers:
        return int(headers[COUNT_HEADER])
    parsed = gateway_pb2.EphemeralDelivery.FromString(delivery)
    return int(parsed.batch.count)
