"""`tamto up --nodes 3`: three storage nodes, three routers, two gateways and auth on
loopback, each with its own data directory, all registered in etcd."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

import tamto_sdk
from tamto_common.dev_credential import load_dev_credential
from tamto_common.ledgers import read_ledgers
from tamto_common.membership import connect_etcd

from .test_launcher import Launcher

pytestmark = pytest.mark.e2e

PARTITIONS = 6


@pytest.mark.timeout(600)  # nine services start one after another: over a minute on 2 cores
def test_up_with_three_nodes_runs_and_registers_every_process(tmp_path: Path) -> None:
    up = Launcher(tmp_path / "data", tmp_path / "up.log")
    up.start("--quiet", "--nodes", "3", ready_s=300)
    try:
        members = up.members()
        assert Counter(m["service"] for m in members) == {
            "auth": 1,
            "storage": 3,
            "router": 3,
            "gateway": 2,
            "processing": 3,
        }
        assert all(m["health"] == "SERVING" for m in members), members
        assert sorted(m["instance_id"] for m in members if m["service"] == "storage") == [
            "storage-1",
            "storage-2",
            "storage-3",
        ]
        assert (up.data_dir / "node-1" / "auth").is_dir()
        assert (up.data_dir / "node-2" / "gateway").is_dir()

        second = next(m["address"] for m in members if m["instance_id"] == "gateway-2")
        payloads = asyncio.run(publish_and_read_back(up, f"tamto://{second}"))
        assert sorted(payloads) == sorted(f"m{i}".encode() for i in range(60))

        # Each partition's data is in the directories of the storage nodes its ledger
        # names (R = 3 by default on three storage nodes: all of them).
        placed = asyncio.run(placement(up.etcd, "spread"))
        assert set(placed) == set(range(PARTITIONS))
        for ensemble in placed.values():
            assert len(ensemble) == 3
            for node in ensemble:
                index = node.removeprefix("storage-")
                streams = up.data_dir / f"node-{index}" / "storage" / "streams"
                assert (streams / "spread").is_dir()
        # `tamto status --json` lists each partition's owner and replicas, all up.
        status = up.status()
        spread = [p for p in status["partitions"] if p["stream"] == "spread"]
        assert sorted(p["partition"] for p in spread) == list(range(PARTITIONS))
        for partition in spread:
            assert partition["owner"] in {"router-1", "router-2", "router-3"}, partition
            ledger = partition["ledgers"][-1]
            assert [r["state"] for r in ledger["replicas"]] == ["up"] * 3, ledger
            assert partition["problems"] == []
        assert status["problems"] == []
    finally:
        assert up.stop() == 0
    assert "etcd stopped" in up.output()


async def publish_and_read_back(up: Launcher, second_gateway: str) -> list[bytes]:
    """Publish 60 keyed messages through the first gateway; read them through the second."""
    api_key = load_dev_credential(up.data_dir)
    assert api_key is not None
    async with tamto_sdk.connect(f"tamto://127.0.0.1:{up.gateway}", api_key=api_key) as c:
        await c.streams.ensure("spread", partitions=PARTITIONS)
        async with c.producer("spread") as producer:
            futures = [
                await producer.send(f"m{i}".encode(), key=f"k{i}".encode()) for i in range(60)
            ]
            await asyncio.gather(*futures)
    got: list[bytes] = []
    async with tamto_sdk.connect(second_gateway, api_key=api_key) as c:
        async with c.consumer("spread", "all") as consumer:
            while len(got) < 60:
                batch = await consumer.receive_batch(max_messages=60, timeout_s=30)
                assert len(batch) > 0, f"only {len(got)} of 60 delivered"
                got.extend(m.payload for m in batch)
                consumer.ack(batch)
    return got


async def placement(etcd_port: int, stream: str) -> dict[int, tuple[str, ...]]:
    """partition -> the storage nodes of its current ledger, for partitions that have one."""
    client = await connect_etcd([("127.0.0.1", etcd_port)])
    try:
        placed = {}
        for p in range(PARTITIONS):
            current = (await read_ledgers(client, stream, p)).current
            if current is not None:
                placed[p] = current.ensemble
        return placed
    finally:
        await client.close()
