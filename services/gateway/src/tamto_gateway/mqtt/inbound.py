"""A connection's PUBLISH packets carried into Tamto, in order, and acknowledged once
stored.

Packets queue up to the connection's inflight limit; past it the connection stops
reading its socket (TCP pushes back on that client alone). One worker takes what
is queued, groups consecutive packets bound to one place (a persistent stream's
partition, an ephemeral stream's topic) into one batch, publishes the groups one
after another through the gateway's own Publish and PublishEphemeral (its
authorization, checks and durability), then acknowledges them in the order
received (MQTT-4.6.0-2): PUBACK for QoS 1, PUBREC for QoS 2. A persistent
stream's PUBACK therefore means durable.

QoS 2 is stored once per packet id until its PUBREL: a PUBLISH of a packet id
already queued or stored by this connection is only answered (PUBREC) again. A
new packet id's message gets a Tamto message id, and the pair is part of the
session's state (`received`), saved in the cluster for a persistent session
before the message is stored; a resend after the session resumed, on any
gateway, is stored again under that id, which the stream's dedup drops if the
first copy was stored (a keyless one goes to the partition its id picks, so
that dedup sees both). A retained message is kept in etcd once its publish
succeeded.

A publish the gateway refuses (no permission, no such stream, too large) ends
the connection: MQTT 3.1.1 has no negative PUBACK, and dropping it silently
would lose the message without anyone knowing.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tamto_common.policy import Permission
from tamto_gateway.mqtt import codec
from tamto_gateway.mqtt.context import Identity, Shared
from tamto_gateway.mqtt.topics import Address
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.partitioning import partition_for_key
from tamto_protocol.v1 import gateway_pb2, messages_pb2

#: The header carrying a message's MQTT publish QoS (a delivery never exceeds it).
QOS_HEADER = "mqtt-qos"
#: Most packets published in one batch.
MAX_GROUP = 500


@dataclass(frozen=True, slots=True)
class Item:
    packet: codec.Publish
    address: Address
    #: Already stored (a QoS 2 packet sent again before its PUBREL): only answered.
    stored: bool = False
    #: A QoS 2 message's Tamto id: the same for every PUBLISH of its packet id.
    message_id: str | None = None


class Inbound:
    """Carries one connection's publishes (module docstring)."""

    def __init__(
        self,
        shared: Shared,
        identity: Identity,
        send: Callable[[bytes], None],
        persist: Callable[[], Awaitable[None]],
        received: dict[int, str],
    ) -> None:
        self._shared = shared
        self._identity = identity
        self._send = send
        self._persist = persist
        self._queue: asyncio.Queue[Item] = asyncio.Queue(shared.limits.max_inflight)
        self._turns = itertools.count()
        #: QoS 2 packet ids not yet released, with their messages' Tamto ids (the
        #: session's: a resumed session's come from the cluster state).
        self.received: dict[int, str] = dict(received)
        #: QoS 2 packet ids queued or stored by this connection.
        self._here: set[int] = set()

    async def put(self, packet: codec.Publish) -> None:
        """Queue a client's PUBLISH (waits while the connection's inflight is full)."""
        address = self._shared.rule.topic(packet.topic)
        if packet.qos != 2 or packet.packet_id is None:
            await self._queue.put(Item(packet, address))
            return
        packet_id = packet.packet_id
        if packet_id in self._here:  # queued or stored already: only answered
            await self._queue.put(Item(packet, address, stored=True))
            return
        message_id = self.received.get(packet_id)
        if message_id is None:  # a new message: its id is saved before it is stored
            message_id = f"mqtt-{secrets.token_hex(12)}"
            self.received[packet_id] = message_id
            await self._persist()
        # Else sent before the session resumed: stored again under the same id, which
        # the stream's dedup drops if it was stored then.
        self._here.add(packet_id)
        await self._queue.put(Item(packet, address, message_id=message_id))

    async def released(self, packet_id: int) -> None:
        """The client's PUBREL: the packet id is a new message's from now on."""
        self._here.discard(packet_id)
        if self.received.pop(packet_id, None) is not None:
            await self._persist()
        self._send(codec.ack(codec.PUBCOMP, packet_id))

    async def publish_now(self, packet: codec.Publish) -> None:
        """Publish one message at once, unacknowledged (a will)."""
        await self._store([Item(packet, self._shared.rule.topic(packet.topic))])

    async def run(self) -> None:
        """Publish what is queued until cancelled; a refusal is raised."""
        while True:
            items = [await self._queue.get()]
            while len(items) < MAX_GROUP and not self._queue.empty():
                items.append(self._queue.get_nowait())
            for partition, group in self._groups(items):
                await self._store(group, partition)
                self._acknowledge(group)
            for _ in items:
                self._queue.task_done()

    async def flushed(self) -> None:
        """Until every publish queued so far is stored."""
        await self._queue.join()

    def _groups(self, items: list[Item]) -> list[tuple[int | None, list[Item]]]:
        """Consecutive items bound to one place, each group with its partition (None:
        by key, or ephemeral): keyless ones of one run of the worker share one."""
        groups: list[tuple[int | None, list[Item]]] = []
        keyless = next(self._turns)
        last: tuple[str, object] | None = None
        for item in items:
            key = item.address.key
            place = (item.address.stream, key if key is not None else item.address.rest)
            if groups and place == last and _joins(item) and _joins(groups[-1][1][0]):
                groups[-1][1].append(item)
            else:
                groups.append((keyless if key is None else None, [item]))
            last = place
        return groups

    async def _store(self, group: list[Item], turn: int | None = None) -> None:
        if group[0].stored:
            return
        address = group[0].address
        call = await self._identity.call()
        principal = await self._shared.guard.principal(
            call.invocation_metadata(), call.peer(), "Publish"
        )
        # Before the stream is looked up: its existence is not told to whoever may
        # not publish to it.
        await self._shared.guard.require(
            principal, Permission.PUBLISH, address.stream, call.peer(), "Publish"
        )
        stream = await self._shared.streams.describe(address.stream)
        batch = _batch(group)
        if stream.ephemeral:
            await self._shared.servicer.PublishEphemeral(
                gateway_pb2.PublishEphemeralRequest(
                    stream=address.stream, topic=address.ephemeral_topic, batch=batch
                ),
                call,
            )
        else:
            key = address.key
            pinned = key if key is not None else _encoded(group[0].message_id)
            if pinned is not None:  # by key; a keyless QoS 2 message by its id
                partition = partition_for_key(pinned, stream.partitions)
            else:
                partition = (turn if turn is not None else next(self._turns)) % stream.partitions
            await self._shared.servicer.Publish(
                gateway_pb2.PublishRequest(stream=address.stream, partition=partition, batch=batch),
                call,
            )
        for item in group:
            if item.packet.retain:
                await self._shared.state.retain(
                    item.packet.topic, item.packet.payload, item.packet.qos
                )

    def _acknowledge(self, group: list[Item]) -> None:
        for item in group:
            packet_id = item.packet.packet_id
            if packet_id is None:
                continue
            kind = codec.PUBACK if item.packet.qos == 1 else codec.PUBREC
            self._send(codec.ack(kind, packet_id))


def _joins(item: Item) -> bool:
    """Whether an item may share a batch with its neighbours bound to the same place:
    not one only answered, nor a keyless QoS 2 message (its id picks its partition)."""
    return not item.stored and (item.address.key is not None or item.message_id is None)


def _encoded(message_id: str | None) -> bytes | None:
    return None if message_id is None else message_id.encode()


def _batch(group: list[Item]) -> messages_pb2.RecordBatch:
    packets = [i.packet for i in group]
    arrow_ipc = encode_batch(
        BatchColumns(
            payloads=[p.payload for p in packets],
            keys=[i.address.key for i in group],
            headers=[{QOS_HEADER: str(p.qos)} for p in packets],
            ids=[i.message_id for i in group],
            event_times_us=[None] * len(packets),
        )
    )
    return messages_pb2.RecordBatch(arrow_ipc=arrow_ipc, count=len(packets))
