"""One directory segment store for a 3-node cluster with R = 3: Spark's plain Parquet read of
`<store>/streams/<stream>` returns every acked message exactly once (each node's own data
directory holds a copy of each), and so do DuckDB and Polars reading the same files, and
the `tamto` data source planning from the store's manifest (batch and streaming), which
refuses a truncated or corrupt object with DATA_LOSS naming it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

import tamto_sdk
from tamto_common.polling import poll_blocking
from tamto_protocol.segment import segment_file_name
from tamto_sdk import StreamConfig
from tamto_spark.location import read_stream_manifest
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra

from .conftest import (
    FAST_SEALING,
    SEAL_DEADLINE_S,
    Acked,
    publish,
    stream_until_caught_up,
    unique,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("segment-store")


@pytest.fixture(scope="module")
def store_cluster(
    tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory, store_dir: Path
) -> Iterator[TestCluster]:
    env = {**FAST_SEALING, "TAMTO_STORAGE_SEGMENT_STORE": store_dir.as_uri()}
    cluster = TestCluster(tmp_path_factory.mktemp("cluster"), tamto_infra, nodes=3, storage_env=env)
    with cluster.running() as running:
        yield running


@pytest.fixture
async def store_client(store_cluster: TestCluster) -> AsyncIterator[tamto_sdk.Client]:
    async with await tamto_sdk.connect(store_cluster.url, api_key=store_cluster.credential) as c:
        yield c


def wait_in_store(directory: Path, count: int) -> None:
    """Wait until the store's segments of the stream hold `count` rows."""

    def rows() -> int:
        return (
            int(ds.dataset(directory, partitioning="hive").count_rows())
            if directory.exists()
            else 0
        )

    poll_blocking(lambda: rows() >= count, SEAL_DEADLINE_S, f"{count} rows in {directory}")


def wait_listed(location: str, acked: list[Acked]) -> None:
    """Wait until the store's manifests list every acked offset."""
    ends: dict[int, int] = {}
    for a in acked:
        ends[a.partition] = max(ends.get(a.partition, 0), a.offset + 1)

    def listed() -> bool:
        have = read_stream_manifest(location).end_offsets()
        return all(have.get(p, 0) >= end for p, end in ends.items())

    poll_blocking(listed, SEAL_DEADLINE_S, f"the store's manifests list {ends}")


async def replicated_stream(
    client: tamto_sdk.Client, prefix: str, partitions: int, count: int, keys: int
) -> tuple[str, list[Acked]]:
    """A new stream on all three nodes (R = 3, Q = 2) with `count` messages on `keys`
    keys published; its name and what was acknowledged."""
    stream = unique(prefix)
    await client.streams.ensure(
        stream, partitions=partitions, config=StreamConfig(replication_factor=3, ack_quorum=2)
    )
    return stream, await publish(client, stream, count, keys=keys)


def keyed(acked: list[Acked]) -> list[tuple[int, int, bytes]]:
    return sorted((a.partition, a.offset, a.payload) for a in acked)


async def test_spark_duckdb_and_polars_read_every_acked_message_once_from_the_store(
    spark: SparkSession,
    store_client: tamto_sdk.Client,
    store_cluster: TestCluster,
    store_dir: Path,
) -> None:
    stream, acked = await replicated_stream(store_client, "stored", 3, 90, keys=12)
    directory = store_dir / "streams" / stream
    wait_in_store(directory, len(acked))
    for node in store_cluster.storages():  # every replica sealed its own copy as before
        assert (store_cluster.data_dir(node) / "streams" / stream).is_dir()

    rows = spark.read.parquet(str(directory)).select("partition", "offset", "payload").collect()
    assert sorted((r.partition, r.offset, bytes(r.payload)) for r in rows) == keyed(acked)
    assert len({r.partition for r in rows}) == 3

    pattern = f"{directory}/**/*.parquet"
    relation = duckdb.sql(
        f"SELECT partition, \"offset\", payload FROM read_parquet('{pattern}', "
        "hive_partitioning = true)"
    )
    assert relation is not None
    found = relation.fetchall()
    assert sorted((int(p), o, bytes(b)) for p, o, b in found) == keyed(acked)
    frame = pl.read_parquet(pattern, hive_partitioning=True)
    got = zip(frame["partition"], frame["offset"], frame["payload"], strict=True)
    assert sorted((int(p), o, bytes(b)) for p, o, b in got) == keyed(acked)


async def test_the_tamto_source_reads_the_store_once_and_refuses_a_damaged_object(
    spark: SparkSession,
    store_client: tamto_sdk.Client,
    store_dir: Path,
    tmp_path: Path,
) -> None:
    stream, acked = await replicated_stream(store_client, "listed", 2, 40, keys=6)
    location = (store_dir / "streams" / stream).as_uri()
    wait_listed(location, acked)

    rows = spark.read.format("tamto").load(location).collect()
    assert sorted((r.partition, r.offset, bytes(r.payload)) for r in rows) == keyed(acked)
    by_options = (
        spark.read.format("tamto").option("store", store_dir.as_uri()).option("stream", stream)
    )
    assert by_options.load().count() == len(acked)

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream_until_caught_up(spark, location, out, checkpoint)
    streamed = spark.read.parquet(str(out)).collect()
    assert sorted((r.partition, r.offset, bytes(r.payload)) for r in streamed) == keyed(acked)

    # Truncate one object: the source names it and reads nothing from it as good data.
    first = min(a.offset for a in acked if a.partition == 0)
    [victim] = [
        p
        for p in (store_dir / "streams" / stream / "partition=0").glob("segment-*.parquet")
        if p.name.startswith(segment_file_name(first, 0)[:28])
    ]
    victim.write_bytes(victim.read_bytes()[:-5])
    with pytest.raises(Exception, match="DATA_LOSS") as caught:
        spark.read.format("tamto").load(location).collect()
    assert victim.name in str(caught.value)
