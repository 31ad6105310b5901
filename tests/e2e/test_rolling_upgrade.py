"""A rolling upgrade, per service: on a two-node cluster (two gateways, two routers, two
storage nodes, auth), each process is replaced one at a time (SIGTERM, started again)
while a producer publishes through one gateway and a consumer acks through the other.
No acknowledged message is lost, and no client sees an error: what the replacements
cause (UNAVAILABLE while a process is away) the SDK retries."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import tamto_sdk
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e

STREAM = "rolling"
#: The order an operator would replace them in: storage nodes, routers, gateways, auth.
ORDER = ("storage", "storage-2", "router", "router-2", "gateway-2", "gateway", "auth")
#: Messages each side must handle after a replacement before the next one starts.
PROGRESS = 20


class Traffic:
    """A producer (ids on every message) and a consumer acking what it receives."""

    def __init__(self) -> None:
        self.acked: list[str] = []
        self.received: set[str] = set()
        self.stop = asyncio.Event()

    async def produce(self, client: tamto_sdk.Client) -> None:
        async with client.producer(STREAM, linger_s=0) as producer:
            seq = 0
            while not self.stop.is_set():
                seq += 1
                await producer.send_and_wait(f"m{seq}".encode(), id=f"m{seq}")
                self.acked.append(f"m{seq}")
                await asyncio.sleep(0.01)

    async def consume(self, client: tamto_sdk.Client) -> None:
        async with client.consumer(STREAM, "upgrade-watch") as consumer:
            while not self.stop.is_set() or not self.caught_up():
                batch = await consumer.receive_batch(max_messages=100, timeout_s=0.2)
                self.received.update(m.id or "" for m in batch)
                consumer.ack(batch)

    def caught_up(self) -> bool:
        return set(self.acked) <= self.received


async def progressed(traffic: Traffic, tasks: list[asyncio.Task[None]], what: str) -> None:
    """Both sides handled `PROGRESS` more messages (a client that failed fails here)."""
    acked, received = len(traffic.acked), len(traffic.received)

    def moved_on() -> bool:
        for task in tasks:
            if task.done():
                task.result()  # raises the client's error
        return (
            len(traffic.acked) >= acked + PROGRESS and len(traffic.received) >= received + PROGRESS
        )

    await eventually(moved_on, 90, f"traffic to flow again after {what}", interval_s=0.05)


@pytest.mark.timeout(900)
async def test_replacing_every_process_one_at_a_time_loses_nothing(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    with TestCluster(tmp_path / "cluster", tamto_infra, nodes=2).running() as cluster:
        key = cluster.credential
        second = f"tamto://{cluster.address('gateway-2')}"
        async with (
            await tamto_sdk.connect(cluster.url, api_key=key) as producing,
            await tamto_sdk.connect(second, api_key=key) as consuming,
        ):
            await producing.streams.ensure(STREAM, partitions=4)
            traffic = Traffic()
            tasks = [
                asyncio.create_task(traffic.produce(producing)),
                asyncio.create_task(traffic.consume(consuming)),
            ]
            try:
                await progressed(traffic, tasks, "the start")
                for name in ORDER:
                    started = time.monotonic()
                    await asyncio.to_thread(cluster.stop, name)
                    await asyncio.to_thread(cluster.start, name)
                    await progressed(traffic, tasks, f"replacing {name}")
                    print(f"{name} replaced, traffic flowing in {time.monotonic() - started:.1f} s")
                traffic.stop.set()
                await asyncio.wait_for(asyncio.gather(*tasks), 90)
            finally:
                traffic.stop.set()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    assert traffic.acked, "nothing was published"
    lost = sorted(set(traffic.acked) - traffic.received, key=lambda i: int(i[1:]))
    assert not lost, f"{len(lost)} acknowledged messages never delivered: {lost[:10]}"
