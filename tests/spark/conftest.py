"""Fixtures for the Spark tests: a cluster whose storage seals quickly, and helpers.

Storage here seals any unsealed data 200 ms after its ack (checked every
100 ms) so tests wait little; the default (5 s) is tested on its own in
tests/e2e/test_segments_visible.py.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import tamto_sdk
from tamto_common.polling import poll_blocking
from tamto_protocol.segment import read_manifest
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra

FAST_SEALING = {"TAMTO_STORAGE_SEAL_AGE_MS": "200", "TAMTO_STORAGE_SEAL_CHECK_MS": "100"}
SEAL_DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def sealing_cluster(
    tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestCluster]:
    with TestCluster(tmp_path_factory.mktemp("cluster"), tamto_infra).running(
        {"storage": FAST_SEALING}
    ) as cluster:
        yield cluster


@pytest.fixture
async def client(sealing_cluster: TestCluster) -> AsyncIterator[tamto_sdk.Client]:
    async with tamto_sdk.connect(sealing_cluster.url, api_key=sealing_cluster.credential) as c:
        yield c


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def data_dir(cluster: TestCluster) -> Path:
    """Storage's data directory in a test cluster."""
    return cluster.workdir / "storage"


def stream_dir(cluster: TestCluster, stream: str) -> Path:
    return data_dir(cluster) / "streams" / stream


@dataclass(frozen=True)
class Acked:
    """A message as published and acknowledged."""

    partition: int
    offset: int
    key: bytes | None
    payload: bytes
    headers: dict[str, str]
    id: str | None


T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)


async def publish(
    client: tamto_sdk.Client, stream: str, count: int, *, prefix: str = "m", keys: int = 3
) -> list[Acked]:
    """Publish `count` messages with keys, headers, ids and event times; return the acks."""
    acked = []
    async with client.producer(stream) as producer:
        futures = []
        for i in range(count):
            key = f"key-{i % keys}".encode()
            headers = {"n": str(i), "kind": prefix}
            futures.append(
                (
                    key,
                    f"{prefix}-{i}".encode(),
                    headers,
                    f"{prefix}-{i}",
                    await producer.send(
                        f"{prefix}-{i}".encode(),
                        key=key,
                        headers=headers,
                        id=f"{prefix}-{i}",
                        event_time=T0 + timedelta(seconds=i),
                    ),
                )
            )
        for key, payload, headers, id_, future in futures:
            result = await future
            acked.append(Acked(result.partition, result.offset, key, payload, headers, id_))
    return acked


def wait_sealed(
    directory: Path, ends: dict[int, int], deadline_s: float = SEAL_DEADLINE_S
) -> float:
    """Wait until the manifest covers offsets below `ends` per partition; return seconds taken."""
    have: dict[int, int] = {}

    def sealed() -> bool:
        have.update(read_manifest(directory).end_offsets())
        return all(have.get(p, 0) >= end for p, end in ends.items())

    try:
        return poll_blocking(sealed, deadline_s, f"sealed up to {ends}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; have {have}") from None


def ends_of(acked: list[Acked]) -> dict[int, int]:
    ends: dict[int, int] = {}
    for a in acked:
        ends[a.partition] = max(ends.get(a.partition, 0), a.offset + 1)
    return ends


def stream_until_caught_up(spark: SparkSession, location: str, out: Path, checkpoint: Path) -> None:
    """Run a streaming query of the `tamto` source at `location` (partition, offset and
    payload into Parquet files in `out`, its checkpoint in `checkpoint`) until it read
    all there is, then stop it."""
    query = (
        spark.readStream.format("tamto")
        .load(location)
        .select("partition", "offset", "payload")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
