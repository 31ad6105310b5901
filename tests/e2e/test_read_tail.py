"""Storage's read tail with real processes: sealed WAL files stay and serve a consumer
that starts at the earliest offset; kill -9 of storage drops the tail at the next open
and every message is still delivered, from Parquet. The router keeps no read cache
here, so every delivery is a storage read."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import tamto_sdk
from tamto_protocol.segment import read_manifest
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

from .members import metrics_of
from .traffic import consume_all

pytestmark = pytest.mark.e2e

STREAM = "tail"
TOTAL = 2_000
#: Storage seals at once, into small segments, from small WAL files; the tail keeps 1 MiB.
STORAGE_ENV = {
    "TAMTO_STORAGE_SEAL_AGE_MS": "100",
    "TAMTO_STORAGE_SEAL_CHECK_MS": "100",
    "TAMTO_STORAGE_SEGMENT_BYTES": str(64 << 10),
    "TAMTO_STORAGE_WAL_FILE_BYTES": str(64 << 10),
    "TAMTO_STORAGE_WAL_TAIL_MB": "1",
}


ROUTER_ENV = {"TAMTO_ROUTER_READ_CACHE_MB": "0"}


@pytest.fixture
def tail_cluster(tamto_infra: Infra, tmp_path: Path) -> Iterator[TestCluster]:
    with TestCluster(tmp_path / "cluster", tamto_infra).running(
        {"storage": STORAGE_ENV, "router": ROUTER_ENV}
    ) as cluster:
        yield cluster


async def batches_read_from(cluster: TestCluster, source: str) -> float:
    """Storage's count of batches served by reads from `source` (wal, tail, segments)."""
    text = await metrics_of(cluster, "storage")
    match = re.search(rf'^tamto_storage_read_batches_total{{source="{source}"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def wal_bytes(partition_dir: Path) -> int:
    return sum(p.stat().st_size for p in (partition_dir / "_wal").glob("*.log"))


async def test_the_tail_serves_sealed_messages_and_a_kill9_loses_none(
    tail_cluster: TestCluster,
) -> None:
    cluster = tail_cluster
    stream_dir = cluster.workdir / "storage" / "streams" / STREAM
    partition_dir = stream_dir / "partition=0"
    payloads = [f"m{i:05d}".encode() + b"." * 200 for i in range(TOTAL)]
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(STREAM, partitions=1)
        async with client.producer(STREAM, max_batch_messages=100) as producer:
            await asyncio.gather(*[await producer.send(p) for p in payloads])

    def sealed() -> bool:
        return read_manifest(stream_dir).end_offsets().get(0, 0) >= TOTAL

    await eventually(sealed, 30, "every message sealed")
    # Everything is sealed, and the newest sealed WAL files are still there.
    tail = wal_bytes(partition_dir)
    assert 64 << 10 <= tail <= 1 << 20, f"a tail within its budget, not {tail} bytes"
    assert await consume_all(cluster, STREAM, "first", TOTAL) == payloads
    assert await batches_read_from(cluster, "tail") > 0
    assert await batches_read_from(cluster, "segments") == 0, "no Parquet decoded"

    cluster.kill9("storage")
    cluster.start("storage", extra_env=STORAGE_ENV)
    assert await consume_all(cluster, STREAM, "second", TOTAL) == payloads
    assert wal_bytes(partition_dir) == 0, "the open removed the tail"
    assert await batches_read_from(cluster, "segments") > 0, "Parquet served the second"
    assert await batches_read_from(cluster, "tail") == 0
