"""Planned moves keep each key's order (docs/cluster.md section 4).

On two nodes, a key-shared subscription consumes (acking each message a little
after it arrives, as a consumer that processes them does) while a producer
publishes keyed messages. A router joins, then the first router is drained
(`client.cluster.drain`): the partitions change owners twice, each change
opening a new ledger. The checker asserts that no acknowledged message is lost,
that each key's first deliveries come in publish (offset) order, and that no
message of a new ledger was delivered before every earlier message of its key
had been acked: the new owner holds its ledger back until then (the drain
gate), so the old owner's unacked messages are never processed after newer
ones of their key. A second test moves one partition with `tamto partition
move` (undraining the first router with `tamto node undrain`) and checks the
precise refusals, `tamto node drain`'s among them.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import aetcd
import pytest

import tamto_sdk
from tamto_common.config import parse_endpoints
from tamto_common.ledgers import read_ledgers
from tamto_common.membership import connect_etcd
from tamto_common.placement import Placement
from tamto_common.ring import HashRing, partition_key
from tamto_router.ownership import OWNERS
from tamto_sdk import MessageBatch, StreamConfig, SubscriptionType
from tamto_sdk.errors import FailedPrecondition, InvalidArgument, NotFound
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import running_infra
from tamto_testing.waiting import eventually, long_tests_enabled

from .test_cli_pub_sub import tamto

pytestmark = pytest.mark.e2e

PARTITIONS = 4
KEYS = 16
#: How long the consumers hold a message before acking it (its processing time).
ACK_DELAY_S = 1.5
#: Deliveries to wait for between the moves (more with TAMTO_LONG_TESTS=1).
STEP = 1_500 if long_tests_enabled() else 150


@pytest.fixture
async def etcd(two_nodes: TestCluster) -> AsyncIterator[aetcd.Client]:
    client = await connect_etcd(parse_endpoints(two_nodes.infra.etcd_endpoint))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    """Two nodes, the second router not started: the first test starts it (a join).

    On an etcd and NATS of their own: on the session's, routers (and placement
    decisions) of other modules' clusters would join this ring."""
    workdir = tmp_path_factory.mktemp("moves")
    with running_infra(workdir / "infra") as infra:
        cluster = TestCluster(workdir / "cluster", infra, nodes=2)
        try:
            cluster.start_together(["auth", "storage", "storage-2", "router"])
            cluster.start_together(["gateway", "gateway-2"])
            yield cluster
        finally:
            cluster.stop_all()


def shared_with_the_joiner(cluster: TestCluster) -> str:
    """A new stream name of whose partitions the ring gives the joining router some.

    The ring places each partition by its hash, so of a random name's 4 partitions
    the joiner would get none about one time in 16, and the join would move nothing.
    """
    ring = HashRing([cluster.instance_id("router"), cluster.instance_id("router-2")])
    joiner = cluster.instance_id("router-2")
    for _ in range(1_000):
        stream = f"moves-{secrets.token_hex(3)}"
        if any(ring.owner(partition_key(stream, p)) == joiner for p in range(PARTITIONS)):
            return stream
    raise AssertionError("no stream name of 1,000 has a partition on the joiner")


@dataclass
class Checker:
    """What the consumers saw: each delivery (time, partition, offset, key, payload) in
    the order it arrived, and the time each (partition, offset) was first acked."""

    deliveries: list[tuple[float, int, int, bytes, bytes]] = field(default_factory=list)
    first_ack: dict[tuple[int, int], float] = field(default_factory=dict)

    def payloads(self) -> set[bytes]:
        return {d[4] for d in self.deliveries}

    async def consume(self, consumer: tamto_sdk.Consumer, stop: asyncio.Event) -> None:
        """Receive, record, and ack each batch `ACK_DELAY_S` after it arrived."""
        held: list[tuple[float, MessageBatch]] = []
        while not stop.is_set() or held:
            batch = await consumer.receive_batch(max_messages=200, timeout_s=0.05)
            now = time.monotonic()
            for m in batch:
                self.deliveries.append((now, m.partition, m.offset, m.key or b"", m.payload))
            if len(batch):
                held.append((now + ACK_DELAY_S, batch))
            while held and (held[0][0] <= now or stop.is_set()):
                _, due = held.pop(0)
                acked_at = time.monotonic()
                for m in due:
                    self.first_ack.setdefault((m.partition, m.offset), acked_at)
                consumer.ack(due)


async def owners(etcd: aetcd.Client, stream: str) -> dict[int, str]:
    """Partition -> the instance id of the router holding its owner key."""
    found = {}
    for kv in await etcd.get_prefix(f"{OWNERS}{stream}/".encode()):
        found[int(kv.key.decode().rsplit("/", 1)[1])] = json.loads(kv.value)["owner"]
    return found


async def test_join_and_drain_keep_each_keys_order_for_key_shared(
    two_nodes: TestCluster, etcd: aetcd.Client
) -> None:
    cluster = two_nodes
    stream = shared_with_the_joiner(cluster)
    checker, acked, stop = Checker(), dict[bytes, tuple[int, int]](), asyncio.Event()
    failed: list[str] = []  # publishes not acknowledged (a timeout across a move)
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(
            stream, partitions=PARTITIONS, config=StreamConfig(replication_factor=1)
        )
        consumers = [
            client.consumer(stream, "keyed", subscription_type=SubscriptionType.KEY_SHARED)
            for _ in range(2)
        ]
        for consumer in consumers:
            await consumer.__aenter__()
        tasks = [asyncio.create_task(checker.consume(c, stop)) for c in consumers]
        tasks.append(asyncio.create_task(produce(client, stream, stop, acked, failed)))
        try:
            await join_then_drain(cluster, client, etcd, stream, checker, tasks)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        await read_until_delivered(checker, consumers, set(acked))
        for consumer in consumers:
            await consumer.__aexit__(None, None, None)

    ledger_starts = {}
    for p in range(PARTITIONS):
        ledgers = (await read_ledgers(etcd, stream, p)).ledgers
        ledger_starts[p] = [x.first_offset for x in ledgers]
        assert len(ledgers) >= 2, f"partition {p} changed owner at least once: {ledgers}"
    violations = order_violations(checker, ledger_starts)
    assert not violations, f"{len(violations)} order violations, e.g. {violations[:5]}"
    print(
        f"\n{len(acked)} acked, {len(failed)} not acknowledged {failed[:3]}, "
        f"{len(checker.deliveries)} deliveries, ledgers per partition "
        f"{ {p: len(s) for p, s in ledger_starts.items()} }"
    )


async def produce(
    client: tamto_sdk.Client,
    stream: str,
    stop: asyncio.Event,
    acked: dict[bytes, tuple[int, int]],
    failed: list[str],
) -> None:
    """Publish on `KEYS` keys in turn until `stop`: payload → (partition, offset) of each
    acknowledged, the error of each not."""
    async with client.producer(stream) as producer:
        i = 0
        while not stop.is_set():
            key = f"k{i % KEYS}".encode()
            payload = f"{key.decode()}:{i}".encode()
            try:
                result = await (await producer.send(payload, key=key))
            except tamto_sdk.TamtoError as exc:  # not acknowledged: may or may not be stored
                failed.append(repr(exc))
            else:
                acked[payload] = (result.partition, result.offset)
            i += 1


async def join_then_drain(
    cluster: TestCluster,
    client: tamto_sdk.Client,
    etcd: aetcd.Client,
    stream: str,
    checker: Checker,
    tasks: list[asyncio.Task[None]],
) -> None:
    """With traffic flowing (`tasks`), router-2 joins and takes its share of the ring,
    then the first router is drained; `STEP` deliveries more after each move."""
    first, joiner = cluster.instance_id("router"), cluster.instance_id("router-2")

    async def delivered(n: int) -> bool:
        for task in tasks:
            if task.done():
                task.result()  # a failure of the traffic fails the test now
        return len(checker.deliveries) >= n

    await eventually(lambda: delivered(STEP), 60, "deliveries before the join")
    assert set((await owners(etcd, stream)).values()) == {first}

    # A router joins: its share of the ring moves to it.
    cluster.start("router-2")
    await eventually(lambda: _owns_some(etcd, stream, joiner), 60, "the joiner to own partitions")
    mark = len(checker.deliveries)
    await eventually(lambda: delivered(mark + STEP), 60, "deliveries after the join")

    # The first router is drained: every partition moves to the joiner.
    assert first in await client.cluster.drain(first)
    await eventually(lambda: _all_owned_by(etcd, stream, joiner), 60, "the drain to finish")
    mark = len(checker.deliveries)
    await eventually(lambda: delivered(mark + STEP), 60, "deliveries after the drain")


async def read_until_delivered(
    checker: Checker, consumers: list[tamto_sdk.Consumer], acked: set[bytes]
) -> None:
    """Every acknowledged message is delivered (the consumers read on until then)."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(checker.consume(c, stop)) for c in consumers]
    try:
        await eventually(lambda: acked <= checker.payloads(), 60, "every acked message delivered")
    finally:
        stop.set()
        await asyncio.gather(*tasks)


def order_violations(checker: Checker, ledger_starts: dict[int, list[int]]) -> list[str]:
    """Per key: first deliveries out of offset order, and a message of a ledger first
    delivered before every earlier message of its key was acked."""
    found: list[str] = []
    first_delivery: dict[tuple[int, int], tuple[float, bytes]] = {}
    last_offset: dict[bytes, int] = {}
    for at, partition, offset, key, _ in checker.deliveries:
        if (partition, offset) in first_delivery:
            continue
        first_delivery[(partition, offset)] = (at, key)
        if offset < last_offset.get(key, -1):
            found.append(f"key {key!r}: offset {offset} first delivered after {last_offset[key]}")
        last_offset[key] = max(offset, last_offset.get(key, -1))
    for (partition, offset), (at, key) in first_delivery.items():
        earlier_ledger = max((s for s in ledger_starts[partition] if s <= offset), default=0)
        for (p, o), (_, k) in first_delivery.items():
            if p == partition and k == key and o < earlier_ledger:
                acked_at = checker.first_ack.get((p, o))
                if acked_at is None or acked_at > at:
                    found.append(
                        f"{partition}/{offset} (key {key!r}, ledger from {earlier_ledger}) "
                        f"delivered before {p}/{o} of the previous ledger was acked"
                    )
                    break
    return found


async def _owns_some(etcd: aetcd.Client, stream: str, router: str) -> bool:
    return router in (await owners(etcd, stream)).values()


async def _all_owned_by(etcd: aetcd.Client, stream: str, router: str) -> bool:
    held = await owners(etcd, stream)
    return len(held) == PARTITIONS and set(held.values()) == {router}


async def test_partition_move_puts_a_partition_on_a_router_and_refuses_bad_requests(
    two_nodes: TestCluster, etcd: aetcd.Client
) -> None:
    stream = f"move-{secrets.token_hex(3)}"
    cluster = two_nodes
    if "router-2" not in cluster.processes:  # run alone
        cluster.start("router-2")
    routers = [cluster.instance_id(n) for n in cluster.routers()]
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(
            stream, partitions=PARTITIONS, config=StreamConfig(replication_factor=1)
        )
        key_of: dict[int, bytes] = {}  # a key of each partition
        async with client.producer(stream) as producer:
            for i in range(8 * PARTITIONS):
                sent = await (await producer.send(b"before", key=f"k{i}".encode()))
                key_of.setdefault(sent.partition, f"k{i}".encode())
        assert len(key_of) == PARTITIONS
        # The first test drained it: undrained by the CLI, as an operator would.
        undrained = await asyncio.to_thread(tamto, cluster, "node", "undrain", routers[0])
        assert undrained.returncode == 0, undrained.stderr
        assert undrained.stdout == f"{routers[0]}: undrained (drained routers: none)\n"
        # A router that is not the ring's choice for partition 0.
        target = next(r for r in routers if r != Placement().owner(routers, stream, 0))

        moved = await asyncio.to_thread(
            tamto, cluster, "partition", "move", f"{stream}/0", "--to", target, "--json"
        )
        assert moved.returncode == 0, moved.stderr
        assert json.loads(moved.stdout) == {"stream": stream, "partition": 0, "router": target}

        sent_after = 0

        async def on_target() -> bool:
            nonlocal sent_after
            async with client.producer(stream) as producer:
                await (await producer.send(b"after", key=key_of[0]))
            sent_after += 1
            return (await owners(etcd, stream)).get(0) == target

        # A move is a hand-back and a claim on first use: tens of seconds at load 20+.
        await eventually(on_target, 90, "partition 0 to be owned by its new router")
        # Every message sent: a read that stops earlier may leave another partition's
        # "before" unread behind partition 0's "after" (no order across partitions).
        read = await read_all(client, stream, 8 * PARTITIONS + sent_after)
        assert read.count(b"before") == 8 * PARTITIONS, "nothing lost in the move"

        # Refusals, each precise.
        with pytest.raises(NotFound, match="does not exist"):
            await client.cluster.move_partition(f"{stream}-nope", 0, target)
        with pytest.raises(NotFound, match=f"has no partition {PARTITIONS}"):
            await client.cluster.move_partition(stream, PARTITIONS, target)
        with pytest.raises(FailedPrecondition, match="router 'router-gone' is not live"):
            await client.cluster.move_partition(stream, 0, "router-gone")
        with pytest.raises(InvalidArgument, match="router"):
            await client.cluster.move_partition(stream, 0, "no/such")
        with pytest.raises(NotFound, match="router 'router-gone' is not registered"):
            await client.cluster.drain("router-gone")
        refused = await asyncio.to_thread(tamto, cluster, "node", "drain", "router-gone", "--json")
        assert refused.returncode == 4  # NOT_FOUND
        assert "router 'router-gone' is not registered" in refused.stderr
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        # Back to the ring's choice (`--to ring`).
        ring_choice = Placement().owner(routers, stream, 0)
        assert await client.cluster.move_partition(stream, 0, None) == ring_choice


async def read_all(
    client: tamto_sdk.Client, stream: str, at_least: int, wanted: frozenset[bytes] = frozenset()
) -> list[bytes]:
    """At least `at_least` messages of `stream`, and every payload in `wanted` (a stream
    may hold more than was acknowledged: a publish that timed out may be stored)."""
    got: list[bytes] = []
    async with client.consumer(stream, "reader") as consumer:
        while len(got) < at_least or not wanted <= set(got):
            # Patient: a lull of 15 s+ after a move is slow on a loaded machine, not lost.
            batch = await consumer.receive_batch(timeout_s=60)
            assert len(batch) > 0, f"only {len(got)} messages"
            got.extend(m.payload for m in batch)
            consumer.ack(batch)
    return got
