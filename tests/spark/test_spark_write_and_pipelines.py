"""Spark writes into Tamto (a retried task does not duplicate) and the pipelines run on real data."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType

import tamto_sdk
from tamto_protocol.partitioning import partition_for_key
from tamto_spark.datasource import register
from tamto_spark.pipelines import dead_letters, replay, traffic
from tamto_testing.cluster import TestCluster

from .conftest import T0, data_dir, ends_of, publish, stream_dir, unique, wait_sealed

pytestmark = pytest.mark.e2e

ROWS = 40


async def test_write_with_a_retried_task_publishes_every_row_once(
    spark: SparkSession, client: tamto_sdk.Client, sealing_cluster: TestCluster
) -> None:
    stream = unique("written")
    await client.streams.ensure(stream, partitions=2)
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("payload", BinaryType()),
            StructField("headers", MapType(StringType(), StringType())),
        ]
    )
    rows = [(f"k{i % 4}", f"row-{i}".encode(), {"n": str(i)}) for i in range(ROWS)]
    frame = spark.createDataFrame(rows, schema).repartition(2)
    (
        frame.write.format("tamto")
        .mode("append")
        .option("url", sealing_cluster.url)
        .option("apiKey", sealing_cluster.credential)
        # The first attempt of Spark partition 0 publishes 5 rows, then fails;
        # Spark runs it again (the test session allows 3 attempts per task).
        .option("failFirstAttemptAfterRows", "5")
        .save(stream)
    )
    directory = stream_dir(sealing_cluster, stream)
    # A sentinel after the write in each partition: once it is sealed, so is
    # everything the write stored, duplicates included if there were any.
    ends = {}
    async with client.producer(stream) as producer:
        for partition in range(2):
            key = next(
                k for i in range(100) if partition_for_key(k := f"s{i}".encode(), 2) == partition
            )
            result = await producer.send_and_wait(b"sentinel", key=key)
            ends[partition] = result.offset + 1
    wait_sealed(directory, ends)
    got = [
        r
        for r in spark.read.format("tamto").load(str(directory)).collect()
        if r.payload != b"sentinel"
    ]
    payloads = sorted(bytes(r.payload) for r in got)
    assert payloads == sorted(p for _, p, _ in rows), "every row once, none twice"
    assert len({r.id for r in got}) == ROWS
    assert all(r.id.split(":")[1] in {"0", "1"} for r in got), "ids: <prefix>:<partition>:<row>"


async def test_a_thread_that_registers_the_source_writes_into_tamto(
    spark: SparkSession, client: tamto_sdk.Client, sealing_cluster: TestCluster
) -> None:
    """PySpark runs a new Python thread's calls on a new JVM thread, with no active
    session, and Spark finds the source a write names through that; `register` in the
    thread makes the session active there (without it: DATA_SOURCE_NOT_FOUND)."""
    stream = unique("threaded")
    await client.streams.ensure(stream, partitions=1)
    frame = spark.createDataFrame([(f"row-{i}".encode(),) for i in range(ROWS)], "payload binary")
    errors: list[BaseException] = []

    def write() -> None:
        try:
            register(spark)
            writer = frame.write.format("tamto").mode("append")
            writer.option("url", sealing_cluster.url).option(
                "apiKey", sealing_cluster.credential
            ).save(stream)
        except BaseException as exc:  # the test's thread reports it
            errors.append(exc)

    thread = threading.Thread(target=write, name="spark-writer")
    thread.start()
    await asyncio.to_thread(thread.join, 120)
    assert not thread.is_alive(), "the write did not end within 120 s"
    assert not errors, errors
    stats = await client.streams.stats(stream)
    assert sum(p.end_offset for p in stats.partitions) == ROWS


async def test_traffic_report(
    spark: SparkSession, client: tamto_sdk.Client, sealing_cluster: TestCluster, tmp_path: Path
) -> None:
    stream = unique("traffic")
    await client.streams.ensure(stream, partitions=2)
    acked = await publish(client, stream, 30, keys=4)
    wait_sealed(stream_dir(sealing_cluster, stream), ends_of(acked))
    out = tmp_path / "traffic"

    report = traffic.run(spark, str(data_dir(sealing_cluster)), stream, str(out), top=3)

    assert sum(r["messages"] for r in report.per_minute) == len(acked)
    assert sum(r["bytes"] for r in report.per_minute) == sum(
        len(a.payload) + len(a.key or b"") for a in acked
    )
    assert {r["partition"] for r in report.per_minute} == {a.partition for a in acked}
    assert [r["messages"] for r in report.top_keys] == [8, 8, 7]
    assert report.latency["messages"] == len(acked)
    assert report.latency["p50_ms"] > 0, "published after the (past) event times"
    assert report.chart is not None
    assert report.chart.read_bytes()[:4] == b"\x89PNG"
    assert pq.read_table(out / "per_minute").num_rows == len(report.per_minute)
    assert "Top 3 keys" in report.text
    assert "key-0" in report.text


async def test_dead_letter_report(
    spark: SparkSession, client: tamto_sdk.Client, sealing_cluster: TestCluster, tmp_path: Path
) -> None:
    source = unique("orders")
    dlq = f"{source}.dlq"
    await client.streams.ensure(dlq, partitions=1)
    letters = [
        ("max_deliveries", 0, 3, 5),
        ("max_deliveries", 0, 9, 5),
        ("max_deliveries", 1, 4, 5),
        ("max_lag", 1, 7, 2),
    ]
    async with client.producer(dlq) as producer:
        for reason, partition, offset, deliveries in letters:
            await producer.send_and_wait(
                b"poison",
                headers={
                    "tamto.dlq.reason": reason,
                    "tamto.dlq.stream": source,
                    "tamto.dlq.partition": str(partition),
                    "tamto.dlq.offset": str(offset),
                    "tamto.dlq.subscription": "billing",
                    "tamto.dlq.delivery_count": str(deliveries),
                },
                event_time=T0 + timedelta(seconds=offset),
            )
    wait_sealed(stream_dir(sealing_cluster, dlq), {0: len(letters)})
    out = tmp_path / "dlq"

    report = dead_letters.run(spark, str(data_dir(sealing_cluster)), dlq, str(out))

    by_reason = {(r["reason"], r["source_partition"]): r for r in report.by_reason}
    assert by_reason[("max_deliveries", 0)]["messages"] == 2
    assert by_reason[("max_deliveries", 0)]["first_offset"] == 3
    assert by_reason[("max_deliveries", 0)]["last_offset"] == 9
    assert by_reason[("max_lag", 1)]["messages"] == 1
    counts = {(r["delivery_count"], r["reason"]): r["messages"] for r in report.by_delivery_count}
    assert counts == {(5, "max_deliveries"): 3, (2, "max_lag"): 1}
    assert report.chart is not None
    assert report.chart.exists()
    assert pq.read_table(out / "by_reason").num_rows == len(report.by_reason)


async def test_replay_republishes_an_offset_range_into_another_stream(
    spark: SparkSession, client: tamto_sdk.Client, sealing_cluster: TestCluster, tmp_path: Path
) -> None:
    stream, target = unique("source"), unique("replayed")
    await client.streams.ensure(stream, partitions=1)
    await client.streams.ensure(target, partitions=1)
    acked = await publish(client, stream, 20)
    wait_sealed(stream_dir(sealing_cluster, stream), ends_of(acked))

    def run() -> replay.ReplaySummary:
        return replay.run(
            spark,
            str(data_dir(sealing_cluster)),
            stream,
            target,
            url=sealing_cluster.url,
            api_key=sealing_cluster.credential,
            out_dir=str(tmp_path / "replay"),
            starting_offsets={0: 5},
            ending_offsets={0: 15},
        )

    summary = run()
    run()  # the same replay again: same dedup ids, nothing published twice
    assert summary.per_partition == [
        {"partition": 0, "messages": 10, "first_offset": 5, "last_offset": 14}
    ]
    wait_sealed(stream_dir(sealing_cluster, target), {0: 10})
    got = spark.read.format("tamto").load(str(stream_dir(sealing_cluster, target))).collect()
    wanted = {a.offset: a for a in acked if 5 <= a.offset < 15}
    assert sorted(bytes(r.payload) for r in got) == sorted(a.payload for a in wanted.values())
    for row in got:
        source = wanted[int(row.headers["tamto.replay.offset"])]
        assert bytes(row.key) == source.key
        assert row.headers["n"] == source.headers["n"]
        assert row.id == f"replay:{stream}:0:{source.offset}"
