"""A damaged replica is repaired from a healthy one, online.

Three storage nodes hold a stream with R = 3, Q = 2. One bit is flipped, while
everything runs, in a file of the replica the partition's owner reads from: a
sealed segment (first test) or an unsealed WAL frame (second). A consumer from
earliest still reads every acknowledged message intact (the router reads the
damaged range from another replica instead of answering DATA_LOSS), and within
a deadline the damaged node reads the range intact again from its own files:
the router copied it from a healthy replica and storage installed it
(`tamto_storage.replica_repair`), the damaged file kept under `_damaged/`, an
audit record in the node's `audit.jsonl`, and `tamto storage verify`'s checks
find nothing. Before, the consumer got DATA_LOSS until an operator stopped the
node and ran `tamto storage repair`, which records the range as lost.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

import tamto_sdk
from tamto_common.channels import ChannelPool
from tamto_common.errors import TamtoError
from tamto_protocol.batch import decode_batch
from tamto_protocol.segment import read_manifest, segment_file_name
from tamto_router.storage_client import StorageClient
from tamto_sdk import Start, StreamConfig
from tamto_storage.scrub import verify
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e

#: Every read goes to storage (not the router's memory), so the damage is met.
ROUTER_ENV = {"TAMTO_ROUTER_READ_CACHE_MB": "0"}
#: Segment test: every stored batch sealed into its own segment, at once, and no
#: read tail (sealed WAL files kept to serve reads instead of the segments).
SEALING = {
    "TAMTO_STORAGE_WAL_TAIL_MB": "0",
    "TAMTO_STORAGE_SEAL_AGE_MS": "100",
    "TAMTO_STORAGE_SEAL_CHECK_MS": "100",
    "TAMTO_STORAGE_SEGMENT_BYTES": "1",
}
#: WAL test: nothing is sealed on its own while the test runs.
NOT_SEALING = {"TAMTO_STORAGE_SEAL_AGE_MS": "600000"}
PAYLOADS = [f"message-{i:02d}".encode() for i in range(30)]


def started(
    tamto_infra: Infra, tmp_path: Path, storage_env: dict[str, str]
) -> Iterator[TestCluster]:
    cluster = TestCluster(tmp_path / "cluster", tamto_infra, nodes=3)
    with cluster.running({"storage": storage_env, "router": ROUTER_ENV}) as running:
        yield running


@pytest.fixture
def sealing_cluster(tamto_infra: Infra, tmp_path: Path) -> Iterator[TestCluster]:
    yield from started(tamto_infra, tmp_path, SEALING)


@pytest.fixture
def wal_cluster(tamto_infra: Infra, tmp_path: Path) -> Iterator[TestCluster]:
    yield from started(tamto_infra, tmp_path, NOT_SEALING)


async def publish(client: tamto_sdk.Client, stream: str) -> None:
    """Three stored batches of ten messages, offsets 0-9, 10-19 and 20-29."""
    await client.streams.ensure(
        stream, partitions=1, config=StreamConfig(replication_factor=3, ack_quorum=2)
    )
    async with client.producer(stream) as producer:
        for first in (0, 10, 20):
            sent = [await producer.send(p) for p in PAYLOADS[first : first + 10]]
            await asyncio.gather(*sent)


def read_replica(cluster: TestCluster, stream: str) -> str:
    """The storage node the partition's owner reads from (its latest claim logs it: the
    first replica of the ensemble that was at the log's end when it opened)."""
    claims = []
    for router in cluster.routers():
        for line in (cluster.workdir / "logs" / f"{router}.log").read_text().splitlines():
            if '"partition claimed"' in line and stream in line:
                record = json.loads(line)
                if record.get("stream") == stream:
                    claims.append((record["timestamp"], record["storage_node"]))
    assert claims, f"no router logged claiming {stream}"
    name_of = {cluster.instance_id(n): n for n in cluster.storages()}
    return name_of[max(claims)[1]]


def flip_bit(path: Path, at: int) -> None:
    with path.open("r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))


async def consume_all(client: tamto_sdk.Client, stream: str, n: int) -> list[bytes]:
    got: list[bytes] = []
    async with client.consumer(stream, "reader", start=Start.earliest()) as consumer:
        while len(got) < n:
            batch = await consumer.receive_batch(max_messages=n, timeout_s=30)
            assert len(batch) > 0, f"only {len(got)} of {n} delivered"
            got.extend(m.payload for m in batch)
            consumer.ack(batch)
    return got


async def repaired(cluster: TestCluster, name: str, stream: str, what: str) -> None:
    """Wait until node `name` reads offsets 0-29 intact from its own files, then check
    the evidence: the damaged file under `_damaged/`, the audit record, a clean verify."""
    channels = ChannelPool()
    storage = StorageClient(channels.get(cluster.address(name)))

    async def reads_intact() -> bool:
        got: list[bytes] = []
        offset = 0
        while offset < len(PAYLOADS):
            try:
                batches, offset = await storage.read(stream, 0, offset, 100)
            except TamtoError:  # DATA_LOSS until repaired
                return False
            if not batches:
                return False
            for b in batches:
                got.extend(decode_batch(b.arrow_ipc).column("payload").to_pylist())
        return got[: len(PAYLOADS)] == PAYLOADS

    try:
        await eventually(reads_intact, 60.0, f"{name} reads the {what} range intact again")
    finally:
        await storage.close()
        await channels.close()
    data_dir = cluster.data_dir(name)
    pdir = data_dir / "streams" / stream / "partition=0"
    assert list((pdir / "_damaged").iterdir()), "the damaged file is kept as evidence"
    records = [json.loads(line) for line in (data_dir / "audit.jsonl").read_text().splitlines()]
    [record] = [r for r in records if r["action"] == "storage.repair_from_replica"]
    assert record["target"] == f"{what} {stream}/0"
    assert record["outcome"] == "repaired"
    assert await asyncio.to_thread(verify, data_dir, stream) == []


async def test_a_damaged_segment_is_served_from_a_healthy_replica_and_repaired(
    sealing_cluster: TestCluster,
) -> None:
    cluster = sealing_cluster
    stream = f"repair-{secrets.token_hex(3)}"
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await publish(client, stream)

        def sealed_everywhere() -> bool:
            return all(
                read_manifest(cluster.data_dir(n) / "streams" / stream).end_offsets().get(0, 0)
                >= 30
                for n in cluster.storages()
            )

        await eventually(sealed_everywhere, 90.0, "every message sealed on every node")
        damaged = read_replica(cluster, stream)
        segment = (
            cluster.data_dir(damaged) / "streams" / stream / "partition=0"
        ) / segment_file_name(10, 19)
        flip_bit(segment, segment.stat().st_size // 2)

        assert await consume_all(client, stream, 30) == PAYLOADS  # no DATA_LOSS, no wrong byte
        async with client.producer(stream) as producer:
            assert (await producer.send_and_wait(b"after")).offset == 30
    await repaired(cluster, damaged, stream, "segment")


async def test_a_damaged_wal_frame_is_served_from_a_healthy_replica_and_repaired(
    wal_cluster: TestCluster,
) -> None:
    cluster = wal_cluster
    stream = f"repair-{secrets.token_hex(3)}"
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await publish(client, stream)
        damaged = read_replica(cluster, stream)
        wal_dir = cluster.data_dir(damaged) / "streams" / stream / "partition=0" / "_wal"
        [wal] = [p for p in wal_dir.iterdir() if p.stat().st_size > 0]
        flip_bit(wal, wal.stat().st_size // 2)  # inside the second frame, offsets 10-19

        assert await consume_all(client, stream, 30) == PAYLOADS  # no DATA_LOSS, no wrong byte
        async with client.producer(stream) as producer:
            assert (await producer.send_and_wait(b"after")).offset == 30
    await repaired(cluster, damaged, stream, "wal")
