"""A connection's deliveries to its client: packet ids, the QoS 1 inflight limit, and
the socket's write buffer.

A QoS 1 delivery takes one of `max_inflight` slots until the client's PUBACK
gives it back (and runs the delivery's own acknowledgement: the Tamto ack of a
persistent stream's message). Past `write_buffer_bytes` queued for the socket a
delivery waits for the client to read: that source stops (a persistent stream's
consumer then holds its credit; an ephemeral stream's buffer at the gateway fills
and drops as the stream's `overflow` says), and no other connection waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tamto_gateway.mqtt import codec
from tamto_gateway.mqtt.context import Limits

OnAck = Callable[[], None]


class Outbound:
    """Sends one connection's packets (module docstring)."""

    def __init__(self, writer: asyncio.StreamWriter, limits: Limits) -> None:
        self._writer = writer
        self._limit = limits.write_buffer_bytes
        writer.transport.set_write_buffer_limits(high=limits.write_buffer_bytes)
        self._slots = asyncio.Semaphore(limits.max_inflight)
        self._inflight: dict[int, OnAck | None] = {}
        self._last_id = 0

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
        """Send one message at `qos` (0 or 1): at 1, `on_ack` runs on its PUBACK."""
        packet_id = None
        if qos:
            await self._slots.acquire()
            packet_id = self._new_id()
            self._inflight[packet_id] = on_ack
        self.send(codec.publish(codec.Publish(topic, payload, qos, retain, dup, packet_id)))
        if self._writer.transport.get_write_buffer_size() > self._limit:
            await self._writer.drain()

    @property
    def unacknowledged(self) -> int:
        """QoS 1 deliveries the client has not acknowledged."""
        return len(self._inflight)

    def acked(self, packet_id: int) -> None:
        """The client's PUBACK (one for no delivery in flight is ignored)."""
        if packet_id not in self._inflight:
            return
        on_ack = self._inflight.pop(packet_id)
        self._slots.release()
        if on_ack is not None:
            on_ack()

    def _new_id(self) -> int:
        while True:
            self._last_id = self._last_id % 65535 + 1
            if self._last_id not in self._inflight:
                return self._last_id
