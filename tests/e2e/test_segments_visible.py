"""With default settings an acknowledged message is in a Parquet segment within 10 s."""

from __future__ import annotations

import uuid

import pyarrow.parquet as pq
import pytest

import tamto_sdk
from tamto_protocol.segment import read_manifest
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e

VISIBLE_WITHIN_S = 10.0


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

    await eventually(in_parquet, VISIBLE_WITHIN_S, "the acked message in Parquet", interval_s=0.1)
    [entry] = read_manifest(stream_dir).segments
    table = pq.read_table(stream_dir / entry.file)
    assert table.column("payload").to_pylist() == [b"hello parquet"]
    assert table.column("offset").to_pylist() == [result.offset]
