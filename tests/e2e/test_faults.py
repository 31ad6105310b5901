"""kill -9 of any service: it leaves etcd within the lease TTL, comes back,
registers again, and every acknowledged message is still delivered."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from typing import Any

import pytest

import tamto_sdk
from tamto_cli.status import fetch_status
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually

from .traffic import consume_all

pytestmark = pytest.mark.e2e


async def registered(cluster: TestCluster) -> dict[str, int]:
    """service -> pid, for this cluster's members in etcd."""
    rows = await fetch_status(cluster.infra.etcd_endpoint)
    own = {cluster.instance_id(name) for name in cluster.ports}
    return {m.service: m.pid for m, _ in rows if m.instance_id in own}


async def publish(cluster: TestCluster, stream: str, payloads: list[bytes]) -> None:
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(stream, partitions=2)
        async with client.producer(stream) as producer:
            futures = [await producer.send(p) for p in payloads]
            await asyncio.gather(*futures)


@pytest.mark.parametrize("victim", ["storage", "router", "gateway", "auth"])
async def test_kill9_of_a_service_loses_no_acknowledged_message(
    fresh_cluster: TestCluster, victim: str
) -> None:
    before = [f"before-{i}".encode() for i in range(200)]
    await publish(fresh_cluster, "s", before)
    pid = (await registered(fresh_cluster))[victim]

    fresh_cluster.kill9(victim)
    ttl = fresh_cluster.shared.lease_ttl_s

    async def gone() -> bool:
        return victim not in await registered(fresh_cluster)

    started = time.monotonic()
    await eventually(gone, ttl + 3, f"{victim} to leave etcd", interval_s=0.1)
    assert time.monotonic() - started <= ttl + 3

    restarted = fresh_cluster.start(victim)
    members: dict[str, int] = {}

    async def back() -> bool:
        members.update(await registered(fresh_cluster))
        return members.get(victim) not in (None, pid)

    # `start` waits for SERVING, which a service reports once registered; waited for
    # here too, with a deadline, so that a failure says what etcd held.
    with contextlib.suppress(AssertionError):
        await eventually(back, ttl + 3, f"{victim} to register again", interval_s=0.1)
    # On failure, say what etcd held and what the service logged: a rare CI failure
    # here once left nothing else to go on.
    assert members.get(victim) not in (None, pid), (
        f"the restarted service registers again; registered: {members}; "
        f"alive: {restarted.alive()}; its log:\n{restarted.log_tail(15)}"
    )

    after = [f"after-{i}".encode() for i in range(50)]
    await publish(fresh_cluster, "s", after)
    got = await consume_all(fresh_cluster, "s", "sub", len(before) + len(after))
    assert sorted(got) == sorted(before + after)


async def test_a_graceful_restart_of_everything_keeps_messages_and_cursors(
    fresh_cluster: TestCluster,
) -> None:
    payloads = [f"m{i}".encode() for i in range(100)]
    await publish(fresh_cluster, "keep", payloads)
    assert len(await consume_all(fresh_cluster, "keep", "half", 100)) == 100
    await publish(fresh_cluster, "keep", [b"late"])

    for name in ("gateway", "router", "storage", "auth"):
        assert fresh_cluster.stop(name) == 0, f"{name} exits cleanly on SIGTERM"
    fresh_cluster.start_all()

    assert sorted(await consume_all(fresh_cluster, "keep", "fresh", 101)) == sorted(
        [*payloads, b"late"]
    )
    # The first subscription acked 100 before the restart: only the late one is left.
    assert await consume_all(fresh_cluster, "keep", "half", 1) == [b"late"]


@pytest.mark.parametrize("victim", ["storage", "router", "gateway"])
async def test_kill9_while_producing_and_consuming_delivers_every_acknowledged_message(
    fresh_cluster: TestCluster, victim: str
) -> None:
    total, kill_after = 600, 150
    acked: set[bytes] = set()

    def record_ack(payload: bytes, future: asyncio.Future[Any]) -> None:
        if not future.exception():
            acked.add(payload)

    received: list[bytes] = []
    killed = asyncio.Event()

    async with tamto_sdk.connect(fresh_cluster.url, api_key=fresh_cluster.credential) as client:
        await client.streams.ensure("load", partitions=2)

        async def produce() -> None:
            async with client.producer("load", linger_s=0.002, max_batch_messages=20) as producer:
                for i in range(total):
                    payload = f"p{i}".encode()
                    future = await producer.send(payload)
                    future.add_done_callback(functools.partial(record_ack, payload))
                    if i == kill_after:
                        await producer.flush()
                        killed.set()
                        await asyncio.to_thread(fresh_cluster.kill9, victim)
                        await asyncio.to_thread(fresh_cluster.start, victim)

        async def consume() -> None:
            async with client.consumer("load", "sink", credits=100) as consumer:
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline:
                    batch = await consumer.receive_batch(max_messages=100, timeout_s=1)
                    received.extend(m.payload for m in batch)
                    consumer.ack(batch)
                    if producer_done.is_set() and acked <= set(received):
                        return

        producer_done = asyncio.Event()
        consumer_task = asyncio.create_task(consume())
        await produce()
        producer_done.set()
        await asyncio.wait_for(consumer_task, 120)

        assert killed.is_set()
        assert len(acked) == total, "the producer retries until every message is acknowledged"
        missing = acked - set(received)
        assert not missing, f"{len(missing)} acknowledged messages never delivered"
        # Everything was acked and the consumer closed cleanly: nothing comes back.
        async with client.consumer("load", "sink") as again:
            late = await again.receive_batch(max_messages=10, timeout_s=1.5)
            assert len(late) == 0, f"acked messages delivered again: {[m.payload for m in late]}"


async def test_after_kill9_of_the_router_only_unacknowledged_messages_come_again(
    fresh_cluster: TestCluster,
) -> None:
    await publish(fresh_cluster, "cursor", [f"m{i}".encode() for i in range(100)])
    async with tamto_sdk.connect(fresh_cluster.url, api_key=fresh_cluster.credential) as client:
        async with client.consumer("cursor", "c", credits=100) as consumer:
            got: list[tamto_sdk.Message] = []
            while len(got) < 100:
                got.extend(await consumer.receive_batch(max_messages=100, timeout_s=10))
            acked = [m for m in got if int(m.payload[1:]) % 3 != 0]  # leave every third unacked
            for message in acked:
                consumer.ack(message)
            await consumer.flush_acks(5)
            # The router persists acks as it gets them; wait until the cursor says so.
            await eventually(
                lambda: cursor_has(fresh_cluster, len(acked)), 10, "acks persisted", interval_s=0.1
            )
            fresh_cluster.kill9("router")
        fresh_cluster.start("router")
        async with client.consumer("cursor", "c") as again:
            unacked = {m.payload for m in got} - {m.payload for m in acked}
            redelivered: list[bytes] = []
            while len(redelivered) < len(unacked):
                batch = await again.receive_batch(max_messages=100, timeout_s=15)
                assert len(batch) > 0, "the unacked messages must come again"
                redelivered.extend(m.payload for m in batch)
                again.ack(batch)
            assert sorted(redelivered) == sorted(unacked)
            assert len(await again.receive_batch(max_messages=10, timeout_s=1)) == 0


async def cursor_has(cluster: TestCluster, acked: int) -> bool:
    """Whether storage's cursor file for subscription `c` records `acked` acked offsets."""
    path = cluster.workdir / "storage" / "streams" / "cursor"
    files = list(path.glob("partition=*/*cursors/c.json"))
    total = 0
    for file in files:
        data = json.loads(file.read_text())
        floor = data.get("ack_floor", 0)
        ranges = data.get("acked_above_floor", [])
        total += floor + sum(last - first + 1 for first, last in ranges)
    return total >= acked
