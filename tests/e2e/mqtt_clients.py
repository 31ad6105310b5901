"""Helpers of the MQTT end-to-end tests: a cluster whose gateways serve MQTT, and a
raw client speaking bytes (for what real clients refuse to send)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from tamto_local.ports import free_port
from tamto_testing.cluster import TestCluster


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass
class MqttCluster:
    """A test cluster with two gateways, each serving MQTT on a port of its own."""

    cluster: TestCluster
    ports: dict[str, int]

    @property
    def credential(self) -> str:
        return self.cluster.credential

    @property
    def url(self) -> str:
        return self.cluster.url


def mqtt_env(port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"TAMTO_GATEWAY_MQTT_PORT": str(port), **(extra or {})}


def start_mqtt(cluster: TestCluster, extra: dict[str, str] | None = None) -> MqttCluster:
    """Start `cluster` with MQTT on its gateway, and a second gateway with MQTT too."""
    first, second = free_port(), free_port()
    cluster.start_all({"gateway": mqtt_env(first, extra)})
    cluster.start_gateway(extra_env=mqtt_env(second, extra))
    return MqttCluster(cluster, {"gateway": first, "gateway-2": second})


def text(value: str) -> bytes:
    raw = value.encode()
    return len(raw).to_bytes(2, "big") + raw


def frame(first: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes([first, len(body)]) + body


def connect_packet(
    client_id: str,
    password: str | None,
    *,
    keep_alive: int = 60,
    level: int = 4,
    clean: bool = True,
) -> bytes:
    flags = (0x02 if clean else 0) | (0xC0 if password is not None else 0)
    body = text("MQTT") + bytes([level, flags]) + keep_alive.to_bytes(2, "big")
    body += text(client_id)
    if password is not None:
        body += text("user") + text(password)
    return bytes([0x10]) + _length(len(body)) + body


def publish_packet(topic: str, payload: bytes, packet_id: int | None = None) -> bytes:
    """A PUBLISH at QoS 1 with `packet_id`, else QoS 0."""
    body = text(topic) + (b"" if packet_id is None else packet_id.to_bytes(2, "big")) + payload
    return bytes([0x32 if packet_id else 0x30]) + _length(len(body)) + body


def _length(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


class RawClient:
    """A TCP connection speaking MQTT bytes by hand."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read(self, count: int, timeout_s: float = 10) -> bytes:
        """Up to `count` bytes (b"" once the server closed)."""
        async with asyncio.timeout(timeout_s):
            try:
                return await self.reader.readexactly(count)
            except asyncio.IncompleteReadError as exc:
                return exc.partial

    async def closed(self, timeout_s: float = 10) -> bool:
        """Whether the server closes the connection within `timeout_s`."""
        async with asyncio.timeout(timeout_s):
            try:
                while await self.reader.read(1024):
                    pass
            except ConnectionError:
                pass
        self.writer.close()
        return True

    def close(self) -> None:
        self.writer.close()

    async def subscribe(self, topic_filter: str, qos: int, packet_id: int = 1) -> bytes:
        """Send a SUBSCRIBE of one filter and return the SUBACK's return code."""
        raw = topic_filter.encode()
        body = packet_id.to_bytes(2, "big") + len(raw).to_bytes(2, "big") + raw + bytes([qos])
        await self.send(bytes([0x82]) + _length(len(body)) + body)
        return await self.read(5)

    async def next_publish_within(self, timeout_s: float) -> tuple[int, int, bytes]:
        async with asyncio.timeout(timeout_s):
            return await self.next_publish()

    async def next_publish(self) -> tuple[int, int, bytes]:
        """The next PUBLISH's first byte, packet id (0 at QoS 0) and payload."""
        first = (await self.read(1))[0]
        length, shift = 0, 0
        while True:
            byte = (await self.read(1))[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        body = await self.read(length)
        topic_length = int.from_bytes(body[:2], "big")
        at = 2 + topic_length
        packet_id = 0
        if first & 0x06:
            packet_id = int.from_bytes(body[at : at + 2], "big")
            at += 2
        return first, packet_id, body[at:]
