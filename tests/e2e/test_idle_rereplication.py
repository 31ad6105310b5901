"""Re-replication for partitions nobody writes to (docs/cluster.md section 2,
"Re-replication"): no router has their logs open, so only the owner's ledger
auditor (`tamto_router.ledger_audit`) notices that a replica stays down and opens
them, and the open log copies each to the fourth storage node (R = 3, Q = 2:
recovering a dead owner's open ledger needs R - Q + 1 replicas, so with R = 2 an
idle partition's loss would wait for the node, its acknowledged tail may be there
only). One partition
starts at 0; the other's start moved past 0 by interest retention before the
loss, so the spare is started at that offset (`OpenPartition.start_at`) and
copied from there. Every acknowledged message still stored is then read back
through a fresh subscription, and the spare holds the last one.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import aetcd
import pytest

import tamto_sdk
from tamto_common.ledgers import read_ledgers
from tamto_protocol.segment import read_manifest
from tamto_sdk import StreamConfig
from tamto_sdk.stream_config import RetentionPolicy
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually
from tests.e2e.test_replicated_failover import caught_up, missing_from_fresh_subscription

pytestmark = pytest.mark.e2e

#: Storage seals at once, so acked messages leave quickly (interest retention).
STORAGE_ENV = {"TAMTO_STORAGE_SEAL_AGE_MS": "100", "TAMTO_STORAGE_SEAL_CHECK_MS": "100"}
#: Routers replace a storage node unregistered for 2 s instead of 10 s (the auditor
#: then reads the ledgers every second): the same path, sooner.
ROUTER_ENV = {"TAMTO_ROUTER_REREPLICATE_AFTER_S": "2"}


def stored_start(cluster: TestCluster, node: str, stream: str) -> int:
    """Partition 0's start in storage node `node`'s newest manifest (0: none yet)."""
    try:
        return read_manifest(cluster.data_dir(node) / "streams" / stream).start_offsets.get(0, 0)
    except FileNotFoundError:
        return 0


def sealed_end(cluster: TestCluster, node: str, stream: str) -> int:
    """Where partition 0's segments end in storage node `node`'s newest manifest."""
    try:
        return read_manifest(cluster.data_dir(node) / "streams" / stream).end_offsets().get(0, 0)
    except FileNotFoundError:
        return 0


async def publish(client: tamto_sdk.Client, stream: str, prefix: str, n: int) -> dict[bytes, int]:
    """`n` messages, each acknowledged before the next is sent: payload -> offset."""
    acked = {}
    async with client.producer(stream) as producer:
        for i in range(n):
            payload = f"{prefix}-{i}".encode()
            acked[payload] = (await (await producer.send(payload, id=payload.decode()))).offset
    return acked


async def test_idle_partitions_whose_replica_died_are_rereplicated(
    tamto_infra: Infra, tmp_path: Path, etcd_client: aetcd.Client
) -> None:
    idle, moved = (f"{x}-{secrets.token_hex(3)}" for x in ("idle-r3", "moved-r3"))
    cluster = TestCluster(tmp_path / "cluster", tamto_infra, nodes=4)
    name_of = {cluster.instance_id(n): n for n in cluster.ports}
    with cluster.running({"storage": STORAGE_ENV, "router": ROUTER_ENV}):
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            r3 = StreamConfig(replication_factor=3, ack_quorum=2)
            await client.streams.ensure(idle, partitions=1, config=r3)
            interest = StreamConfig(
                replication_factor=3, ack_quorum=2, retention_policy=RetentionPolicy.INTEREST
            )
            await client.streams.ensure(moved, partitions=1, config=interest)
            acked = {idle: await publish(client, idle, "i", 10)}
            # `moved`: its first messages acked by its one subscription, then removed
            # by interest retention on every replica; later ones stay (never acked).
            # The first ten are sealed into a segment of their own before the 11th
            # comes: retention drops a whole acked segment (moving the start), but
            # keeps the newest message, so it only rewrites a last segment.
            first = await publish(client, moved, "a", 10)
            ensemble = (await read_ledgers(etcd_client, moved, 0)).ledgers[-1].ensemble

            def sealed_to(end: int) -> bool:
                return all(sealed_end(cluster, name_of[n], moved) >= end for n in ensemble)

            await eventually(lambda: sealed_to(10), 60.0, f"{moved}'s offsets 0-9 sealed")
            first |= await publish(client, moved, "a2", 1)
            await eventually(lambda: sealed_to(11), 60.0, f"{moved}'s offset 10 sealed")
            async with client.consumer(moved, "reader") as consumer:
                got = 0
                while got < len(first):
                    batch = await consumer.receive_batch(max_messages=100, timeout_s=30)
                    assert len(batch) > 0, f"{got} of {len(first)} delivered"
                    for message in batch:
                        consumer.ack(message)
                    got += len(batch)
                await consumer.flush_acks(timeout_s=30)

            def start_moved() -> bool:
                return all(stored_start(cluster, name_of[n], moved) > 0 for n in ensemble)

            await eventually(start_moved, 60.0, f"interest retention moved {moved}'s start")
            acked[moved] = await publish(client, moved, "b", 10)
        # Every router restarts: none has a partition's log open any more (idle).
        cluster.stop_together(cluster.routers())
        cluster.start_together(cluster.routers(), {"router": ROUTER_ENV})
        ensembles = {s: (await read_ledgers(etcd_client, s, 0)).ledgers[-1].ensemble for s in acked}
        # Two ensembles of three among four nodes share two nodes: one dies for good.
        lost = sorted(set(ensembles[idle]) & set(ensembles[moved]))[0]
        cluster.kill9(name_of[lost])
        storage = {cluster.instance_id(n) for n in cluster.storages()}
        for stream, members in ensembles.items():
            (spare,) = storage - set(members)

            async def replaced(stream: str = stream, spare: str = spare) -> bool:
                now = (await read_ledgers(etcd_client, stream, 0)).ledgers
                return all(spare in x.ensemble and lost not in x.ensemble for x in now)

            # The auditor waits 2 s, then the opened log 2 s more: a loose CI bound.
            await eventually(replaced, 120.0, f"{stream}'s ledgers name {spare}, not {lost}")
            await caught_up(cluster, name_of[spare], stream, {0: max(acked[stream].values())})
            missing = await missing_from_fresh_subscription(cluster, stream, set(acked[stream]))
            assert not missing, f"{stream}: lost after re-replication: {sorted(missing)[:5]}"
        spare_of_moved = name_of[next(iter(storage - set(ensembles[moved])))]
        assert stored_start(cluster, spare_of_moved, moved) > 0, "the spare starts past 0"
