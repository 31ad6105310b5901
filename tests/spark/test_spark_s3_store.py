"""Acceptance of the S3 segment store with Spark itself: on a 3-node cluster with R = 3
sealing into SeaweedFS, the storage node that publishes to the store is killed, and
`spark.read.format("tamto")` on the store's S3 URI returns every acknowledged message
exactly once (PyIceberg reads the same from the stream's table: checked on the way, in
`publish_and_kill_the_publisher`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tamto_common.polling import poll_blocking
from tamto_local.s3 import S3Spec
from tamto_spark.location import read_stream_manifest
from tamto_testing.cluster import TestCluster

from ..e2e.test_segment_store import (  # s3_cluster: the same cluster fixture
    PREFIX,
    location,
    publish_and_kill_the_publisher,
    s3_cluster,  # noqa: F401
)

pytestmark = pytest.mark.e2e


async def test_spark_reads_every_acked_message_once_from_s3_after_a_node_died(
    spark: SparkSession,
    s3_cluster: TestCluster,  # noqa: F811
    s3_server: S3Spec,
    tmp_path: Path,
) -> None:
    stream, acked = await publish_and_kill_the_publisher(s3_cluster, s3_server, tmp_path)
    where = location(s3_server, f"{PREFIX}-{tmp_path.name}", stream)
    end = max(offset for _, offset, _ in acked) + 1
    poll_blocking(
        lambda: read_stream_manifest(where).end_offsets().get(0, 0) >= end,
        30,
        "the store's manifest lists every acked offset",
    )
    rows = spark.read.format("tamto").load(where).select("partition", "offset", "payload")
    got = sorted((r.partition, r.offset, bytes(r.payload)) for r in rows.collect())
    assert got == sorted(acked)
