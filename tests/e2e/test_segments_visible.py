"""With default settings an acknowledged message is in a Parquet segment within 10 s."""

from __future__ import annotations

import asyncio
import time
import uuid

import pyarrow.parquet as pq
import pytest

import tamto_sdk
from tamto_protocol.segment import read_manifest
from tamto_testing.cluster import TestCluster

pytestmark = pytest.mark.e2e

VISIBLE_WITHIN_S = 10.0


async def test_an_acked_message_is_sealed_within_ten_seconds_by_default(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    stream = f"visible-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    async with tamto_client.producer(stream) as producer:
        result = await producer.send_and_wait(b"hello parquet", key=b"k")
    acked_at = time.monotonic()
    stream_dir = tamto_cluster.workdir / "storage" / "streams" / stream
    while read_manifest(stream_dir).end_offsets().get(result.partition, 0) <= result.offset:
        assert time.monotonic() - acked_at < VISIBLE_WITHIN_S, "not in Parquet within 10 s"
        await asyncio.sleep(0.1)  # polling the manifest for a condition, not a fixed wait
    [entry] = read_manifest(stream_dir).segments
    table = pq.read_table(stream_dir / entry.file)
    assert table.column("payload").to_pylist() == [b"hello parquet"]
    assert table.column("offset").to_pylist() == [result.offset]
