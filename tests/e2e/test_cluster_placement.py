"""Placement is recorded, never recomputed (Deliver 2; docs/cluster.md section 1).

With several storage nodes, a partition's data is on the node its ledgers name
in etcd. When that node's lease lapses (SIGSTOP past the TTL) and the router
owning its partitions is killed (kill -9), the new owner must not open those
partitions on another, empty node from live membership (as the router did
before ledgers were recorded): it answers UNAVAILABLE naming the node, and once
the node is back every acknowledged message is read back from it.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import aetcd
import pytest

import tamto_sdk
from tamto_common.ledgers import read_ledgers
from tamto_common.membership import list_members
from tamto_router.ownership import OWNERS
from tamto_sdk import ClientOptions, StreamConfig
from tamto_sdk.errors import Unavailable
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

from .traffic import consume_all

pytestmark = pytest.mark.e2e

PARTITIONS = 8


@pytest.fixture
def etcd(etcd_client: aetcd.Client) -> aetcd.Client:
    return etcd_client


async def publish_keyed(
    cluster: TestCluster, stream: str, prefix: str, count: int
) -> dict[int, list[tuple[bytes, bytes]]]:
    """Publish `count` messages with keys k0..k<count-1>; partition -> [(key, payload)] acked."""
    acked: dict[int, list[tuple[bytes, bytes]]] = {}
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        # R = 1: the placement of a one-replica partition is what this file checks.
        await client.streams.ensure(
            stream, partitions=PARTITIONS, config=StreamConfig(replication_factor=1)
        )
        async with client.producer(stream) as producer:
            sent = []
            for i in range(count):
                key, payload = f"k{i}".encode(), f"{prefix}-{i}".encode()
                sent.append((key, payload, await producer.send(payload, key=key)))
            for key, payload, future in sent:
                result = await future
                acked.setdefault(result.partition, []).append((key, payload))
    return acked


async def registered(etcd: aetcd.Client, service: str) -> set[str]:
    return {m.instance_id for m in await list_members(etcd, service)}


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a_lapsed_storage_lease_never_moves_a_partition_to_a_node_without_its_data(
    tamto_infra: Infra, tmp_path: Path, etcd: aetcd.Client, nodes: int
) -> None:
    stream = f"placed-{secrets.token_hex(3)}"
    cluster = TestCluster(tmp_path / "cluster", tamto_infra, nodes=nodes)
    ttl = cluster.shared.lease_ttl_s
    name_of = {cluster.instance_id(n): n for n in cluster.ports}
    with cluster.running():
        before = await publish_keyed(cluster, stream, "before", 40 * PARTITIONS)
        assert set(before) == set(range(PARTITIONS)), "every partition has messages"

        # Each partition has one open ledger, on one of the storage nodes.
        placed: dict[int, str] = {}
        for p in range(PARTITIONS):
            ledgers = await read_ledgers(etcd, stream, p)
            assert len(ledgers.ledgers) == 1
            assert ledgers.ledgers[0].is_open
            (placed[p],) = ledgers.ledgers[0].ensemble
        storage_ids = {cluster.instance_id(n) for n in cluster.storages()}
        assert set(placed.values()) <= storage_ids
        victim = max(storage_ids, key=lambda node: sum(v == node for v in placed.values()))
        on_victim = sorted(p for p, node in placed.items() if node == victim)

        # The victim's lease lapses; the router owning its first partition dies.
        owner_kv = await etcd.get(f"{OWNERS}{stream}/{on_victim[0]}".encode())
        assert owner_kv is not None
        router = name_of[json.loads(owner_kv.value)["owner"]]
        cluster.processes[name_of[victim]].pause()
        try:
            await eventually(
                lambda: _gone(etcd, "storage", victim), ttl + 5, "the paused node to leave etcd"
            )
            cluster.kill9(router)
            await eventually(
                lambda: _gone(etcd, "router", cluster.instance_id(router)),
                ttl + 5,
                "the killed router to leave etcd",
            )
            # Its partitions are not opened anywhere else: UNAVAILABLE naming the node.
            short = ClientOptions(retry_deadline_s=ttl + 4.0)
            async with tamto_sdk.connect(
                cluster.url, api_key=cluster.credential, options=short
            ) as client:
                async with client.producer(stream) as producer:
                    key = before[on_victim[0]][0][0]
                    with pytest.raises(Unavailable) as refused:
                        await (await producer.send(b"during", key=key))
            assert victim in str(refused.value), refused.value
        finally:
            cluster.processes[name_of[victim]].resume()

        await eventually(
            lambda: _back(etcd, "storage", victim), ttl + 10, "the node to register again"
        )
        cluster.start(router)
        after = await publish_keyed(cluster, stream, "after", 10 * PARTITIONS)

        # Every acknowledged message is read back, and nothing moved.
        acked = [
            payload for got in (before, after) for pairs in got.values() for _, payload in pairs
        ]
        read = await consume_all(cluster, stream, "check", len(acked))
        assert sorted(read) == sorted(acked)
        for p in range(PARTITIONS):
            ledgers = await read_ledgers(etcd, stream, p)
            assert {node for ledger in ledgers.ledgers for node in ledger.ensemble} == {
                placed[p]
            }, f"partition {p} stays on {placed[p]}: {ledgers}"
        # The killed router's partitions went to a new epoch: its ledger was closed
        # where storage ended and the next one starts right after it.
        moved = await read_ledgers(etcd, stream, on_victim[0])
        assert len(moved.ledgers) >= 2
        for older, newer in zip(moved.ledgers, moved.ledgers[1:], strict=False):
            assert older.state == "closed"
            assert older.last_offset is not None
            assert newer.first_offset == older.last_offset + 1
            assert newer.epoch > older.epoch


async def _gone(etcd: aetcd.Client, service: str, instance: str) -> bool:
    return instance not in await registered(etcd, service)


async def _back(etcd: aetcd.Client, service: str, instance: str) -> bool:
    return instance in await registered(etcd, service)
