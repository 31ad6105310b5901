"""Issue 21 Deliver 3 for a partition nobody writes to (docs/cluster.md section 2,
"Re-replication"): no router has its log open, so only the owner's ledger auditor
(`tamto_router.ledger_audit`) notices that a replica stays down and opens it, and
the open log copies it to the third storage node. Every acknowledged message is
then read back through a fresh subscription.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import aetcd
import pytest

import tamto_sdk
from tamto_common.ledgers import read_ledgers
from tamto_sdk import StreamConfig
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually
from tests.e2e.test_replicated_failover import caught_up, missing_from_fresh_subscription

pytestmark = pytest.mark.e2e


async def test_an_idle_partition_whose_replica_died_is_rereplicated(
    tamto_infra: Infra, tmp_path: Path, etcd_client: aetcd.Client
) -> None:
    stream = f"idle-r2-{secrets.token_hex(3)}"
    cluster = TestCluster(tmp_path / "cluster", tamto_infra, nodes=3)
    name_of = {cluster.instance_id(n): n for n in cluster.ports}
    with cluster.running():
        acked: dict[bytes, int] = {}
        async with await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            await client.streams.ensure(
                stream, partitions=1, config=StreamConfig(replication_factor=2, ack_quorum=1)
            )
            async with client.producer(stream) as producer:
                for i in range(10):
                    result = await (await producer.send(f"m-{i}".encode(), id=f"m-{i}"))
                    acked[f"m-{i}".encode()] = result.offset
        # Every router restarts: none has the partition's log open any more (idle).
        for router in cluster.routers():
            cluster.stop(router)
        for router in cluster.routers():
            cluster.start(router)
        ledgers = await read_ledgers(etcd_client, stream, 0)
        assert ledgers.current is not None
        lost = ledgers.current.ensemble[-1]
        (spare,) = {cluster.instance_id(n) for n in cluster.storages()} - set(
            ledgers.current.ensemble
        )
        cluster.kill9(name_of[lost])

        async def replaced() -> bool:
            now = (await read_ledgers(etcd_client, stream, 0)).ledgers
            return all(spare in x.ensemble and lost not in x.ensemble for x in now)

        # The auditor waits 10 s, then the opened log 10 s more: a loose CI bound.
        await eventually(replaced, 120.0, f"{stream}'s ledgers name {spare} instead of {lost}")
        await caught_up(cluster, name_of[spare], stream, {0: max(acked.values())})
        missing = await missing_from_fresh_subscription(cluster, stream, set(acked))
        assert not missing, f"lost after re-replication: {sorted(missing)[:5]}"
