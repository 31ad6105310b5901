"""MQTT beside Debian's mosquitto: the same small asyncio client measures Tamto's
gateway broker (docs/mqtt.md) and a mosquitto broker started for the run.

Measured for each, in the coordinator's process (one client for both, so its own
cost weighs on both alike):
- QoS 0 throughput: one publisher sends for the window; the rate is what one
  subscriber received;
- QoS 1 throughput: one publisher with `WINDOW` publishes in flight; the rate is
  PUBACKs (Tamto's: once durable; mosquitto's: once in memory);
- QoS 1 latency at a fixed rate: send time stamped in the payload, read by a
  subscriber (p50 and p99);
- fan-out: one publisher at a fixed rate, `FANOUT` subscribers; delivered msg/s;
- idle connections: `idle` CONNECTed clients held at once, and the broker
  process's resident memory per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tamto_local.ports import free_port

HOST = "127.0.0.1"
#: QoS 1 publishes one publisher keeps in flight.
WINDOW = 64
#: Subscribers of the fan-out phase, and its publish rate (messages per second).
FANOUT = 20
FANOUT_RATE = 200.0
#: Rate of the latency phase (messages per second).
LATENCY_RATE = 500.0


class MqttBenchError(Exception):
    """A broker refused or failed the benchmark's client."""


@dataclass(frozen=True)
class Broker:
    """An MQTT broker to measure: where, the password to send, its process id."""

    name: str
    port: int
    password: str
    pid: int


def _text(value: str) -> bytes:
    raw = value.encode()
    return len(raw).to_bytes(2, "big") + raw


def _frame(first: int, body: bytes) -> bytes:
    length, out = len(body), bytearray([first])
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out) + body


class Client:
    """A minimal MQTT 3.1.1 client: CONNECT, PUBLISH, SUBSCRIBE, PUBACK."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, broker: Broker, client_id: str) -> Client:
        reader, writer = await asyncio.open_connection(HOST, broker.port)
        body = _text("MQTT") + bytes([4, 0xC2]) + (600).to_bytes(2, "big")
        body += _text(client_id) + _text("bench") + _text(broker.password)
        writer.write(_frame(0x10, body))
        client = cls(reader, writer)
        first, payload = await client.packet()
        if first != 0x20 or payload[1] != 0:
            raise MqttBenchError(f"{broker.name} refused the CONNECT: {payload.hex()}")
        return client

    async def packet(self) -> tuple[int, bytes]:
        first = (await self.reader.readexactly(1))[0]
        length, shift = 0, 0
        while True:
            byte = (await self.reader.readexactly(1))[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        return first, await self.reader.readexactly(length)

    async def subscribe(self, topic_filter: str, qos: int) -> None:
        self.writer.write(_frame(0x82, b"\x00\x01" + _text(topic_filter) + bytes([qos])))
        first, payload = await self.packet()
        if first != 0x90 or payload[2] == 0x80:
            raise MqttBenchError(f"subscription to {topic_filter!r} refused")

    def publish(self, topic: str, payload: bytes, packet_id: int = 0) -> None:
        pid = packet_id.to_bytes(2, "big") if packet_id else b""
        self.writer.write(_frame(0x32 if packet_id else 0x30, _text(topic) + pid + payload))

    async def messages(self) -> AsyncIterator[bytes]:
        """Payloads received (QoS 1 ones acknowledged)."""
        while True:
            first, body = await self.packet()
            if first >> 4 != 3:
                continue
            at = 2 + int.from_bytes(body[:2], "big")
            if first & 0x06:
                self.writer.write(b"\x40\x02" + body[at : at + 2])
                at += 2
            yield body[at:]

    def close(self) -> None:
        self.writer.close()


async def _count(client: Client, until: float, counts: list[int]) -> None:
    with contextlib.suppress(TimeoutError, asyncio.IncompleteReadError):
        async with asyncio.timeout(max(0.0, until - time.monotonic())):
            async for _ in client.messages():
                counts[0] += 1


async def qos0_rate(broker: Broker, topic: str, size: int, duration_s: float) -> float:
    """Messages per second one subscriber received while one publisher sent at QoS 0."""
    sub = await Client.connect(broker, f"bench-q0s-{os.getpid()}")
    pub = await Client.connect(broker, f"bench-q0p-{os.getpid()}")
    await sub.subscribe(topic, 0)
    counts = [0]
    start = time.monotonic()
    receiving = asyncio.create_task(_count(sub, start + duration_s + 1, counts))
    payload = b"x" * size
    while time.monotonic() < start + duration_s:
        for _ in range(100):
            pub.publish(topic, payload)
        await pub.writer.drain()
    await receiving
    for c in (sub, pub):
        c.close()
    return counts[0] / duration_s


async def qos1_rate(broker: Broker, topic: str, size: int, duration_s: float) -> float:
    """PUBACKs per second of one publisher keeping `WINDOW` publishes in flight."""
    pub = await Client.connect(broker, f"bench-q1p-{os.getpid()}")
    slots = asyncio.Semaphore(WINDOW)
    acked = [0]

    async def acks() -> None:
        while True:
            first, _ = await pub.packet()
            if first >> 4 == 4:
                acked[0] += 1
                slots.release()

    reading = asyncio.create_task(acks())
    payload, packet_id = b"x" * size, 0
    start = time.monotonic()
    while time.monotonic() < start + duration_s:
        await slots.acquire()
        packet_id = packet_id % 65535 + 1
        pub.publish(topic, payload, packet_id)
    rate = acked[0] / (time.monotonic() - start)
    reading.cancel()
    pub.close()
    return rate


async def _paced(pub: Client, topic: str, size: int, rate: float, duration_s: float) -> int:
    sent, start = 0, time.monotonic()
    padding = b"x" * max(0, size - 8)
    while (now := time.monotonic()) < start + duration_s:
        due = int((now - start) * rate)
        while sent < due:
            pub.publish(topic, struct.pack(">d", time.time()) + padding, 1 + sent % 65535)
            sent += 1
        await asyncio.sleep(0.002)
    return sent


async def _drop_acks(client: Client) -> None:
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            await client.packet()


async def latency(broker: Broker, topic: str, size: int, duration_s: float) -> tuple[float, float]:
    """p50 and p99 publish-to-receive milliseconds at QoS 1, `LATENCY_RATE` per second."""
    sub = await Client.connect(broker, f"bench-lats-{os.getpid()}")
    pub = await Client.connect(broker, f"bench-latp-{os.getpid()}")
    await sub.subscribe(topic, 1)
    samples: list[float] = []

    async def read() -> None:
        async for payload in sub.messages():
            samples.append((time.time() - struct.unpack(">d", payload[:8])[0]) * 1000)

    reading = asyncio.create_task(read())
    acks = asyncio.create_task(_drop_acks(pub))
    await _paced(pub, topic, size, LATENCY_RATE, duration_s)
    await asyncio.sleep(1)
    for task in (reading, acks):
        task.cancel()
    for c in (sub, pub):
        c.close()
    if not samples:
        raise MqttBenchError(f"{broker.name}: no message came back")
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]


async def fanout(broker: Broker, topic: str, size: int, duration_s: float) -> float:
    """Messages per second delivered to `FANOUT` QoS 1 subscribers of one publisher."""
    subs = [await Client.connect(broker, f"bench-fan{i}-{os.getpid()}") for i in range(FANOUT)]
    for sub in subs:
        await sub.subscribe(topic, 1)
    pub = await Client.connect(broker, f"bench-fanp-{os.getpid()}")
    counts = [0]
    end = time.monotonic() + duration_s + 1
    receiving = [asyncio.create_task(_count(sub, end, counts)) for sub in subs]
    acks = asyncio.create_task(_drop_acks(pub))
    await _paced(pub, topic, size, FANOUT_RATE, duration_s)
    await asyncio.gather(*receiving)
    acks.cancel()
    for c in (*subs, pub):
        c.close()
    return counts[0] / duration_s


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def idle_memory(broker: Broker, count: int) -> float:
    """Resident bytes per connection of `count` idle clients held at once."""
    before = _rss(broker.pid)
    clients = [await Client.connect(broker, f"bench-idle{i}") for i in range(count)]
    await asyncio.sleep(1)
    after = _rss(broker.pid)
    for c in clients:
        c.close()
    return (after - before) / count


async def measure(
    broker: Broker, topic_prefix: str, size: int, duration_s: float
) -> dict[str, Any]:
    """Every rate phase against `broker`, topics under `topic_prefix` (the stream)."""
    q0 = await qos0_rate(broker, f"{topic_prefix}/q0", size, duration_s)
    q1 = await qos1_rate(broker, f"{topic_prefix}/q1", size, duration_s)
    p50, p99 = await latency(broker, f"{topic_prefix}/lat", size, duration_s)
    fan = await fanout(broker, f"{topic_prefix}/fan", size, duration_s)
    return {
        "mqtt_qos0_msgs_s": q0,
        "mqtt_qos1_msgs_s": q1,
        "mqtt_latency_p50_ms": p50,
        "mqtt_latency_p99_ms": p99,
        "mqtt_fanout_msgs_s": fan,
    }


def raise_fd_limit() -> None:
    """Allow as many open files as the hard limit (children inherit it): the idle
    connections' phase holds thousands."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _mosquitto_binary() -> str:
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not Path(binary).exists():
        raise MqttBenchError("mosquitto is not installed (apt-get install mosquitto)")
    return binary


def _mosquitto_files(workdir: Path, port: int) -> tuple[Path, Any]:
    """Its configuration (written) and its log (open)."""
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "mosquitto.conf"
    conf.write_text(
        f"listener {port} {HOST}\nallow_anonymous true\nmax_inflight_messages {WINDOW}\n"
        "max_queued_messages 100000\npersistence false\n"
    )
    return conf, (workdir / "mosquitto.log").open("wb")


@contextlib.asynccontextmanager
async def mosquitto_server(workdir: Path) -> AsyncIterator[Broker]:
    """Debian's mosquitto on a free loopback port, anonymous, no persistence."""
    binary, port = _mosquitto_binary(), free_port(HOST)
    conf, log = _mosquitto_files(workdir, port)
    process = await asyncio.create_subprocess_exec(binary, "-c", str(conf), stdout=log, stderr=log)
    try:
        for _ in range(100):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection(HOST, port)
                writer.close()
                break
            await asyncio.sleep(0.05)
        yield Broker("mosquitto", port, "unused", process.pid)
    finally:
        process.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 5)
        log.close()
