"""A connection's deliveries to its client: packet ids, the QoS 1 inflight limit, and
the socket's write buffer.

A QoS 1 delivery takes one of `max_inflight` slots until the client's PUBACK gives
it back (and runs the delivery's own acknowledgement: the Tamto ack of a persistent
stream's message). A QoS 2 delivery takes one until PUBCOMP: its PUBREC runs the
acknowledgement (the message is the client's now, never sent again as a PUBLISH) and
is answered with PUBREL, once the session's state (`releasing`, kept in the cluster
for a persistent session) holds its packet id, so a PUBREL is sent again when the
session resumes, on any gateway. Past `write_buffer_bytes` queued for the socket a
delivery waits for the client to read: that source stops (a persistent stream's
consumer then holds its credit; an ephemeral stream's buffer at the gateway fills
and drops as the stream's `overflow` says), and no other connection waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tamto_gateway.mqtt import codec
from tamto_gateway.mqtt.context import Limits

OnAck = Callable[[], None]
Persist = Callable[[], Awaitable[None]]


async def _nothing_to_persist() -> None:
    return None


class Outbound:
    """Sends one connection's packets (module docstring)."""

    def __init__(self, writer: asyncio.StreamWriter, limits: Limits) -> None:
        self._writer = writer
        self._limit = limits.write_buffer_bytes
        writer.transport.set_write_buffer_limits(high=limits.write_buffer_bytes)
        self._max_inflight = limits.max_inflight
        self._slots = asyncio.Semaphore(limits.max_inflight)
        self._inflight: dict[int, OnAck | None] = {}
        self._qos2: set[int] = set()
        #: QoS 2 deliveries PUBREC'd, awaiting PUBCOMP.
        self.releasing: set[int] = set()
        self._last_id = 0
        #: Saves the session's QoS 2 state (set for a persistent session).
        self.persist: Persist = _nothing_to_persist

    def resume(self, releasing: list[int]) -> None:
        """Send PUBREL again for a resumed session's QoS 2 deliveries awaiting PUBCOMP."""
        self.releasing = set(releasing[: self._max_inflight])
        # Called before any delivery: the slots those take are simply not there.
        self._slots = asyncio.Semaphore(self._max_inflight - len(self.releasing))
        for packet_id in sorted(self.releasing):
            self.send(codec.ack(codec.PUBREL, packet_id))

    def send(self, data: bytes) -> None:
        if not self._writer.is_closing():
            self._writer.write(data)

    async def deliver(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        *,
        retain: bool = False,
        dup: bool = False,
        on_ack: OnAck | None = None,
    ) -> None:
        """Send one message at `qos`: `on_ack` runs on its PUBACK (1) or PUBREC (2)."""
        packet_id = None
        if qos:
            await self._slots.acquire()
            packet_id = self._new_id()
            self._inflight[packet_id] = on_ack
            if qos == 2:
                self._qos2.add(packet_id)
        self.send(codec.publish(codec.Publish(topic, payload, qos, retain, dup, packet_id)))
        if self._writer.transport.get_write_buffer_size() > self._limit:
            await self._writer.drain()

    @property
    def unacknowledged(self) -> int:
        """QoS 1 and 2 deliveries the client has not acknowledged (PUBACK, PUBREC)."""
        return len(self._inflight)

    def acked(self, packet_id: int) -> None:
        """The client's PUBACK (one for no QoS 1 delivery in flight is ignored)."""
        if packet_id not in self._inflight or packet_id in self._qos2:
            return
        on_ack = self._inflight.pop(packet_id)
        self._slots.release()
        if on_ack is not None:
            on_ack()

    async def received(self, packet_id: int) -> None:
        """The client's PUBREC: acknowledged, answered with PUBREL once persisted (one
        for no QoS 2 delivery in flight is answered alone, as MQTT asks)."""
        if packet_id in self._qos2:
            self._qos2.discard(packet_id)
            on_ack = self._inflight.pop(packet_id)
            self.releasing.add(packet_id)
            await self.persist()
            if on_ack is not None:
                on_ack()
        self.send(codec.ack(codec.PUBREL, packet_id))

    async def completed(self, packet_id: int) -> None:
        """The client's PUBCOMP: the delivery's slot and packet id are free."""
        if packet_id not in self.releasing:
            return
        self.releasing.discard(packet_id)
        self._slots.release()
        await self.persist()

    def _new_id(self) -> int:
        while True:
            self._last_id = self._last_id % 65535 + 1
            if self._last_id not in self._inflight and self._last_id not in self.releasing:
                return self._last_id
