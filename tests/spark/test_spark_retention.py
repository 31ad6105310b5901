"""A Spark job reading while retention deletes segments does not fail (the grace period)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from tamto_storage.model import StoredBatch

from ..stored_batches import T_US, Clock, five_sealed_segments, stored_batch

GRACE_S = 60.0


def batch(base: int, count: int) -> StoredBatch:
    # Batch at offset b published b minutes after T: segments ten minutes apart.
    return stored_batch(base, count, T_US + base * 60_000_000)


async def test_a_job_that_listed_segments_finishes_while_retention_expires_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    data, clock = tmp_path / "data", Clock()

    async def retention(stream: str) -> tuple[int, int]:
        return 60_000, 0  # one minute

    async with five_sealed_segments(data, clock, retention, batch, GRACE_S) as sealed:
        partition, sealer, stream_dir = sealed.partition, sealed.sealer, sealed.stream_dir
        # A job that listed the segment files before retention ran.
        plain = spark.read.parquet(stream_dir)

        clock.now = (T_US + 40 * 60_000_000) / 1e6 + 30  # the last segment is 30 s old
        await sealer.run_once()
        assert partition.offsets().start_offset == 40, "four segments expired"

        assert plain.count() == 50, "listed before expiry: still readable in the grace period"
        fresh = spark.read.format("tamto").load(stream_dir).select("offset").collect()
        assert sorted(r.offset for r in fresh) == list(range(40, 50)), "new snapshot: retained"

        clock.now += GRACE_S
        await sealer.run_once()
        assert spark.read.parquet(stream_dir).count() == 10, "files deleted after the grace"
