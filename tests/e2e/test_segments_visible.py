"""With default settings an acknowledged message is in a Parquet segment within 10 s."""

from __future__ import annotations

import uuid

import pyarrow.parquet as pq
import pytest

import tamto_sdk
from tamto_protocol.segment import read_manifest
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually, long_tests_enabled

pytestmark = pytest.mark.e2e

#: The promise: sealed by age (5 s, checked every 1 s) and written within 10 s.
VISIBLE_WITHIN_S = 10.0
#: What a run asserts: the promise with TAMTO_LONG_TESTS=1; 20 s in CI, where writing
#: the Parquet file and this test's polling compete for a loaded 2-core machine (a
#: partition sealed only by size would never be sealed here at all).
ASSERTED_S = VISIBLE_WITHIN_S if long_tests_enabled() else 20.0


async def test_an_acked_message_is_sealed_within_ten_seconds_by_default(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    stream = f"visible-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    async with tamto_client.producer(stream) as producer:
        result = await producer.send_and_wait(b"hello parquet", key=b"k")
    stream_dir = tamto_cluster.workdir / "storage" / "streams" / stream

    def in_parquet() -> bool:
        return read_manifest(stream_dir).end_offsets().get(result.partition, 0) > result.offset

    took = await eventually(in_parquet, 30.0, "the acked message in Parquet", interval_s=0.1)
    assert took <= ASSERTED_S, f"sealed {took:.1f} s after the ack (promised {VISIBLE_WITHIN_S} s)"
    [entry] = read_manifest(stream_dir).segments
    table = pq.read_table(stream_dir / entry.file)
    assert table.column("payload").to_pylist() == [b"hello parquet"]
    assert table.column("offset").to_pylist() == [result.offset]
