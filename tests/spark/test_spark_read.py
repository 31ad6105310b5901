"""Spark reads what Tamto acked: plain Parquet, the `tamto` data source in batch and streaming."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import tamto_sdk
from tamto_testing.cluster import TestCluster

from .conftest import (
    T0,
    Acked,
    ends_of,
    publish,
    stream_dir,
    stream_until_caught_up,
    unique,
    wait_sealed,
)

pytestmark = pytest.mark.e2e


def as_rows(acked: list[Acked]) -> list[tuple[int, int, bytes | None, bytes, dict[str, str]]]:
    return sorted((a.partition, a.offset, a.key, a.payload, a.headers) for a in acked)


async def test_plain_spark_read_returns_exactly_the_acked_sealed_messages(
    spark: SparkSession, client: tamto_sdk.Client, sealing_cluster: TestCluster
) -> None:
    stream = unique("plain")
    await client.streams.ensure(stream, partitions=3)
    acked = await publish(client, stream, 60, keys=12)
    directory = stream_dir(sealing_cluster, stream)
    wait_sealed(directory, ends_of(acked))

    frame = spark.read.parquet(str(directory))
    assert frame.schema.simpleString() == (
        "struct<offset:bigint,publish_time:timestamp,event_time:timestamp,key:binary,"
        "payload:binary,headers:map<string,string>,id:string,producer:string,partition:int>"
    )
    rows = frame.select("partition", "offset", "key", "payload", "headers").collect()
    got = sorted(
        (r.partition, r.offset, bytes(r.key), bytes(r.payload), dict(r.headers)) for r in rows
    )
    assert got == as_rows(acked)
    assert len({p for p, *_ in got}) > 1, "partition discovered from the path"


async def test_data_source_batch_reads_offset_and_time_ranges(
    spark: SparkSession, client: tamto_sdk.Client, sealing_cluster: TestCluster
) -> None:
    stream = unique("batch")
    await client.streams.ensure(stream, partitions=2)
    acked = await publish(client, stream, 40)
    directory = stream_dir(sealing_cluster, stream)
    wait_sealed(directory, ends_of(acked))

    everything = spark.read.format("tamto").load(str(directory))
    rows = everything.select("partition", "offset", "key", "payload", "headers").collect()
    assert sorted(
        (r.partition, r.offset, bytes(r.key), bytes(r.payload), dict(r.headers)) for r in rows
    ) == as_rows(acked)

    ranged = (
        spark.read.format("tamto")
        .option("startingOffsets", '{"0": 2}')
        .option("endingOffsets", '{"0": 5, "1": 0}')
        .load(str(directory))
    )
    assert sorted((r.partition, r.offset) for r in ranged.collect()) == [(0, 2), (0, 3), (0, 4)]

    # Publish times are the acks' times: everything published before now, nothing after.
    later = spark.read.format("tamto").option("startTime", "2999-01-01T00:00:00Z")
    assert later.load(str(directory)).count() == 0
    earlier = spark.read.format("tamto").option("endTime", "2999-01-01T00:00:00Z")
    assert earlier.load(str(directory)).count() == len(acked)
    event_times = {r.event_time for r in everything.select("event_time").collect()}
    assert min(event_times) == T0.replace(tzinfo=None), "session time zone is UTC"


async def test_streaming_restart_from_checkpoint_has_no_loss_or_duplicates(
    spark: SparkSession, client: tamto_sdk.Client, sealing_cluster: TestCluster, tmp_path: Path
) -> None:
    stream = unique("streaming")
    await client.streams.ensure(stream, partitions=2)
    directory = stream_dir(sealing_cluster, stream)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    first = await publish(client, stream, 30, prefix="first")
    wait_sealed(directory, ends_of(first))
    stream_until_caught_up(spark, str(directory), out, checkpoint)
    assert spark.read.parquet(str(out)).count() == len(first)

    second = await publish(client, stream, 25, prefix="second")
    wait_sealed(directory, ends_of(second))
    # A new query on the same checkpoint: continues after `first`.
    stream_until_caught_up(spark, str(directory), out, checkpoint)

    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r.partition, r.offset, bytes(r.payload)) for r in rows)
    assert got == sorted((a.partition, a.offset, a.payload) for a in first + second)
