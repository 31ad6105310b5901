"""Spark across a carry-forward: a plain read never sees a message twice, the `tamto` source
reads each manifest version consistently, and jobs that listed the old files finish."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from tamto_storage.model import Cursor, OffsetRange, StoredBatch
from tamto_storage.sealer import Retention

from ..stored_batches import T_US, Clock, five_sealed_segments, stored_batch

GRACE_S = 60.0
UNACKED = 23


def batch(base: int, count: int) -> StoredBatch:
    return stored_batch(base, count, T_US + base)


def offsets(frame: DataFrame) -> list[int]:
    return sorted(row.offset for row in frame.select("offset").collect())


async def test_spark_reads_across_a_carry_forward(spark: SparkSession, tmp_path: Path) -> None:
    data, clock = tmp_path / "data", Clock()

    async def retention(stream: str) -> Retention:
        return Retention(interest=True)

    async with five_sealed_segments(data, clock, retention, batch, GRACE_S) as sealed:
        partition, sealer, stream_dir = sealed.partition, sealed.sealer, sealed.stream_dir
        listed_before = spark.read.parquet(stream_dir)  # a job that listed the files

        # One subscription acked everything but offset 23.
        acked = Cursor(UNACKED, (OffsetRange(UNACKED + 1, 49),))
        await partition.commit_cursor(1, "billing", acked)
        await sealer.run_once()
        assert partition.offsets().start_offset == 20, "0-19: whole segments, dropped"

        assert offsets(listed_before) == list(range(50)), "listed before: still readable"
        during = offsets(spark.read.parquet(stream_dir))
        assert during == list(range(50)), "the old files, once each; the carried one is hidden"
        tamto = spark.read.format("tamto").load(stream_dir)
        assert offsets(tamto) == [UNACKED, 49], "the new manifest: only what is needed"

        clock.now += GRACE_S
        await sealer.run_once()
        assert offsets(spark.read.parquet(stream_dir)) == [UNACKED, 49], "promoted, old gone"
        assert offsets(spark.read.format("tamto").load(stream_dir)) == [UNACKED, 49]
        row = spark.read.parquet(stream_dir).where(f"offset = {UNACKED}").first()
        assert row is not None
        assert row.payload == b"m23"
        assert row.partition == 0
