"""A seeded random walk over publish, consume, ack, nack, join/leave, consumer crash
and kill -9 of router and storage.

Replay a failure with TAMTO_SEED=<seed printed in the output>; the walk prints a
trace of its steps (shown by pytest when the test fails).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

import tamto_sdk
from tamto_sdk import StreamConfig, SubscriptionType
from tamto_testing.cluster import TestCluster

pytestmark = pytest.mark.e2e

STEPS = 60
MAX_DELIVERIES = 3

# A consumer in its own process, killed with SIGKILL once it holds messages: a
# real crash, not a clean close. It prints how many messages it received.
CRASHING_CONSUMER = """
import asyncio, sys, tamto_sdk
from tamto_sdk import SubscriptionType

async def main():
    client = await tamto_sdk.connect(sys.argv[1], api_key=sys.argv[2])
    consumer = client.consumer(
        "walk", "ks", subscription_type=SubscriptionType.KEY_SHARED, consumer_name=sys.argv[3], credits=50
    )
    await consumer.start()
    batch = await consumer.receive_batch(max_messages=50, timeout_s=2.0)
    print(len(batch), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@dataclass
class Session:
    name: str
    client: tamto_sdk.Client
    consumer: tamto_sdk.Consumer
    clean: bool = True  # no kill -9 while it lived: its acks are persisted on close
    acked: set[bytes] = field(default_factory=set)
    order: dict[bytes | None, list[tuple[int, int]]] = field(
        default_factory=dict
    )  # first deliveries


@dataclass
class World:
    rng: random.Random
    cluster: TestCluster
    published: set[bytes] = field(default_factory=set)  # acknowledged to the producer
    poison: set[bytes] = field(default_factory=set)
    explicit_ids: dict[str, bytes] = field(default_factory=dict)  # id -> first payload sent
    received: set[bytes] = field(default_factory=set)
    persisted_acks: set[bytes] = field(default_factory=set)
    sessions: list[Session] = field(default_factory=list)
    serial: int = 0
    violations: list[str] = field(default_factory=list)


async def connect(cluster: TestCluster) -> tamto_sdk.Client:
    return await tamto_sdk.connect(cluster.url, api_key=cluster.credential)


async def publish(world: World, producer: tamto_sdk.Producer) -> None:
    futures = []
    for _ in range(world.rng.randint(1, 20)):
        world.serial += 1
        payload = f"m{world.serial}".encode()
        if world.rng.random() < 0.05:
            payload = b"poison-" + payload
            world.poison.add(payload)
        message_id = None
        key = f"k{world.rng.randint(0, 6)}".encode()
        if world.rng.random() < 0.3:
            # Dedup is per partition: an id is re-sent with its key, as a retry would be.
            n = world.rng.randint(0, 30)
            message_id, key = f"id{n}", f"k{n % 7}".encode()
            payload = world.explicit_ids.setdefault(message_id, payload)
        futures.append((payload, await producer.send(payload, key=key, id=message_id)))
        print("PUB", payload, key, message_id)
    for payload, future in futures:
        await future
        world.published.add(payload)


async def join(world: World) -> None:
    client = await connect(world.cluster)
    name = f"c{world.serial}-{len(world.sessions)}"
    consumer = client.consumer(
        "walk", "ks", subscription_type=SubscriptionType.KEY_SHARED, consumer_name=name, credits=50
    )
    await consumer.start()
    world.sessions.append(Session(name, client, consumer))
    print("JOIN", name)


def crash_a_consumer(world: World) -> None:
    """A consumer process joins, takes messages, and dies with SIGKILL holding them."""
    name = f"crash{world.serial}"
    cluster = world.cluster
    with subprocess.Popen(
        [sys.executable, "-c", CRASHING_CONSUMER, cluster.url, cluster.credential, name],
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            held = child.stdout.readline().strip()  # ends when it received (or gave up)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(10)
    print("CRASH", name, "holding", held)


async def leave(world: World, session: Session) -> None:
    print("LEAVE", session.name)
    world.sessions.remove(session)
    await session.consumer.close()
    await session.client.close()
    if session.clean:
        world.persisted_acks |= session.acked


async def consume(world: World, session: Session, ack_all: bool = False) -> None:
    """One receive; each message is acked with probability 0.85 (all with `ack_all`),
    poison nacked."""
    batch = await session.consumer.receive_batch(max_messages=30, timeout_s=0.3)
    if session.consumer.reconnects:
        # Its stream broke (a kill, or a lease lost under load): what it is sent
        # now is at-least-once redelivery, not checked for order.
        session.clean = False
    for message in batch:
        first_time = message.payload not in world.received
        print(
            "RECV",
            session.name,
            message.payload,
            message.key,
            (message.partition, message.offset),
            message.delivery_count,
            "first" if first_time else "again",
        )
        if message.payload in world.persisted_acks:
            world.violations.append(f"{message.payload!r} delivered after its ack was persisted")
        world.received.add(message.payload)
        # Key order is checked on first deliveries in sessions that lived through no
        # kill: a crash loses the router's in-memory view (delivery counts, who holds
        # which key), and what is redelivered then is at-least-once, not ordered.
        if first_time and message.delivery_count == 1 and session.clean:
            offsets = session.order.setdefault(message.key, [])
            if offsets and (message.partition, message.offset) < offsets[-1]:
                world.violations.append(f"key {message.key!r} out of order at {message.offset}")
            offsets.append((message.partition, message.offset))
        if message.payload in world.poison:
            session.consumer.nack(message)
        elif ack_all or world.rng.random() < 0.85:
            session.consumer.ack(message)
            print("ACK", session.name, message.payload)
            session.acked.add(message.payload)


async def test_random_walk_keeps_every_delivery_guarantee(fresh_cluster: TestCluster) -> None:
    seed = int(os.environ.get("TAMTO_SEED", random.randrange(1 << 30)))
    print(f"TAMTO_SEED={seed}")
    world = World(random.Random(seed), fresh_cluster)
    admin = await connect(fresh_cluster)
    await admin.streams.ensure(
        "walk",
        partitions=2,
        # A long ack timeout: every redelivery then has a cause the walk controls (a
        # nack, a consumer leaving, a kill), so a persisted ack must never be undone.
        # One replica, named: the default R counts the storage nodes registered at
        # creation, and a storage node an earlier test in this worker killed stays
        # registered until its lease ends, which once made R = 2 on this one-node cluster.
        config=StreamConfig(
            max_deliveries=MAX_DELIVERIES, ack_timeout_ms=60_000, replication_factor=1
        ),
    )
    # The router creates it with the first dead letter; a walk may have none.
    await admin.streams.ensure("walk.dlq", partitions=1, config=StreamConfig(replication_factor=1))
    async with admin.producer("walk", linger_s=0.001) as producer:
        await walk(world, producer)
        await publish(world, producer)

    expected = world.published - world.poison
    dead = await drain(world, admin, expected)
    await fail_on_violations(world, admin, seed)
    await fail_on_undelivered(world, admin, seed, expected)
    dead_payloads = [m.payload for m in dead.values()]
    assert len(dead_payloads) == len(set(dead_payloads)), f"seed {seed}: a dead letter twice"
    assert set(dead_payloads) == world.poison & world.published, (
        f"seed {seed}: dead letters are exactly the messages nacked past max deliveries"
    )
    assert all(m.headers["tamto.dlq.reason"] == "max_deliveries" for m in dead.values())

    # Dedup: every id is stored once, whatever the retries and repeats.
    stored: list[tamto_sdk.Message] = []
    async with admin.consumer("walk", "audit") as audit:
        while batch := await audit.receive_batch(max_messages=500, timeout_s=1.5):
            stored.extend(batch)
            audit.ack(batch)
    explicit = [m.id for m in stored if m.id in world.explicit_ids]
    assert len(explicit) == len(set(explicit)), f"seed {seed}: an id stored twice"
    assert {m.payload for m in stored} >= world.published
    await admin.close()


async def walk(world: World, producer: tamto_sdk.Producer) -> None:
    """`STEPS` random steps, starting with one consumer; one consumer crash and two
    kills -9 at the most."""
    kills = crashes = 0
    await join(world)
    for _ in range(STEPS):
        action = world.rng.random()
        if action < 0.35:
            await publish(world, producer)
        elif action < 0.75 and world.sessions:
            await consume(world, world.rng.choice(world.sessions))
        elif action < 0.85 and len(world.sessions) < 3:
            await join(world)
        elif action < 0.92 and len(world.sessions) > 1:
            await leave(world, world.rng.choice(world.sessions))
        elif action < 0.95 and crashes < 1:
            crashes += 1
            await asyncio.to_thread(crash_a_consumer, world)
        elif kills < 2:
            kills += 1
            victim = world.rng.choice(["router", "storage"])
            for session in world.sessions:
                session.clean = False
            print("KILL", victim)
            await asyncio.to_thread(world.cluster.kill9, victim)
            await asyncio.to_thread(world.cluster.start, victim)


async def drain(
    world: World, admin: tamto_sdk.Client, expected: set[bytes]
) -> dict[int, tamto_sdk.Message]:
    """One consumer takes everything left and acks it (a key-shared subscription
    delivers a newer ledger, after a router's kill, only once the earlier ledgers are
    acked: docs/cluster.md section 4); poison goes to the dead letters, by offset."""
    for session in list(world.sessions):
        await leave(world, session)
    await join(world)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not expected <= world.received:
        await consume(world, world.sessions[0], ack_all=True)
    # Poison keeps coming until it is dead-lettered; give it its deliveries.
    dead: dict[int, tamto_sdk.Message] = {}  # by offset: a redelivery is not a second copy
    async with admin.consumer("walk.dlq", "check") as dlq:
        while time.monotonic() < deadline and len(dead) < len(world.poison & world.published):
            await consume(world, world.sessions[0], ack_all=True)
            letters = await dlq.receive_batch(max_messages=100, timeout_s=0.2)
            dead.update((m.offset, m) for m in letters)
            dlq.ack(letters)
    await leave(world, world.sessions[0])
    return dead


async def fail_on_violations(world: World, admin: tamto_sdk.Client, seed: int) -> None:
    """Fail if the walk saw a violation, saying where the messages it names are stored."""
    if not world.violations:
        return
    copies: dict[bytes, list[tuple[int, int]]] = {}
    async with admin.consumer("walk", "violations") as look:
        while batch := await look.receive_batch(max_messages=500, timeout_s=1.5):
            for m in batch:
                copies.setdefault(m.payload, []).append((m.partition, m.offset))
    named = [v.split("'")[1].encode() for v in world.violations if "'" in v]
    pytest.fail(
        f"seed {seed}: {world.violations[:4]}; stored at {[copies.get(p) for p in named[:4]]}"
    )


async def fail_on_undelivered(
    world: World, admin: tamto_sdk.Client, seed: int, expected: set[bytes]
) -> None:
    """Fail if an acknowledged publish was never delivered, saying where it is stored."""
    if expected <= world.received:
        return
    missing = expected - world.received
    async with admin.consumer("walk", "post-mortem") as look:
        where = []
        while batch := await look.receive_batch(max_messages=500, timeout_s=1.5):
            where += [(m.payload, m.partition, m.offset) for m in batch if m.payload in missing]
            look.ack(batch)  # else the drain gate holds a newer ledger back
    pytest.fail(f"seed {seed}: acknowledged publishes never delivered: {sorted(where)[:8]}")
