"""A full disk: storage on a small tmpfs that fills up refuses appends
with RESOURCE_EXHAUSTED naming the node and the path, acknowledges nothing it did not write,
keeps serving reads, leaves no half-written segment, says so in a gauge and an error line,
and resumes by itself once the filesystem grows again.

The test mounts its own tmpfs (`tamto_testing.small_disk`; root only); it skips, saying
why, where mounting is impossible.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from storage_testkit import make_batch, payload_for

from tamto_cli.status import fetch_status
from tamto_protocol.batch import decode_batch
from tamto_protocol.segment import read_manifest
from tamto_protocol.v1 import messages_pb2, storage_pb2, storage_pb2_grpc
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.small_disk import resize_tmpfs
from tamto_testing.small_disk import small_disk as tamto_small_disk
from tamto_testing.waiting import eventually

REF = storage_pb2.PartitionRef(stream="full", partition=0)
STORAGE_ENV = {
    "TAMTO_STORAGE_WAL_FILE_BYTES": str(512 * 1024),
    "TAMTO_STORAGE_SEGMENT_BYTES": str(256 * 1024),
    "TAMTO_STORAGE_SEAL_AGE_MS": "200",
    "TAMTO_STORAGE_SEAL_CHECK_MS": "100",
}
PAD = 20_000  # bytes per message: a few hundred appends fill the small filesystem


def wire(base: int, count: int = 1) -> Any:
    batch = make_batch(base, count, pad=PAD)
    return messages_pb2.StoredBatch(
        base_offset=batch.base_offset,
        count=batch.count,
        publish_time_us=batch.publish_time_us,
        arrow_ipc=bytes(batch.arrow_ipc),
    )


async def append(stub: Any, base: int) -> int:
    answer = await stub.Append(
        storage_pb2.StorageAppendRequest(partition=REF, epoch=1, batches=[wire(base)])
    )
    return int(answer.next_offset)


async def read_all(stub: Any, end: int) -> int:
    """Read offsets 0..end and check each payload; the log's next offset as storage says."""
    offset, next_offset = 0, 0
    while offset < end:
        read = await stub.Read(storage_pb2.ReadRequest(partition=REF, from_offset=offset))
        assert read.batches, f"nothing read at offset {offset}"
        next_offset = read.next_offset
        for batch in read.batches:
            values = decode_batch(batch.arrow_ipc).column("payload").to_pylist()
            for i, value in enumerate(values):
                if batch.base_offset + i == offset:
                    assert value.rstrip(b"x") == payload_for(offset)
                    offset += 1
    if end == 0:
        next_offset = (
            await stub.Read(storage_pb2.ReadRequest(partition=REF, from_offset=0))
        ).next_offset
    return int(next_offset)


async def disk_full_gauge(cluster: TestCluster) -> float:
    rows = await fetch_status(cluster.infra.etcd_endpoint)
    (member,) = [m for m, _ in rows if m.instance_id == cluster.instance_id("storage")]

    def scrape() -> float:
        url = f"http://{member.metrics_address}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            if family.name == "tamto_storage_disk_full"
            for s in family.samples
        )

    return await asyncio.to_thread(scrape)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs where the cluster's storage keeps its data."""
    with tamto_small_disk(tmp_path / "cluster" / "storage", "3m") as data:
        yield data


async def test_a_full_disk_refuses_appends_serves_reads_and_resumes_by_itself(
    tamto_infra: Infra, small_disk: Path
) -> None:
    cluster = TestCluster(small_disk.parent, tamto_infra)
    cluster.start("storage", extra_env=STORAGE_ENV)
    try:
        async with grpc.aio.insecure_channel(cluster.address("storage")) as channel:
            stub = storage_pb2_grpc.StorageStub(channel)
            await stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=REF, epoch=1))
            acked = 0
            with pytest.raises(grpc.aio.AioRpcError) as refused:  # noqa: PT012 - until full
                for _ in range(2_000):
                    acked = await append(stub, acked)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            details = refused.value.details() or ""
            assert cluster.instance_id("storage") in details, details
            assert str(small_disk) in details, details
            assert acked > 0

            # Nothing unwritten is acknowledged or served, and reads go on.
            assert await read_all(stub, acked) == acked
            with pytest.raises(grpc.aio.AioRpcError) as again:
                await append(stub, acked)
            assert again.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert await disk_full_gauge(cluster) == 1
            log = await asyncio.to_thread(cluster.processes["storage"].log_path.read_text)
            assert '"event": "storage disk full"' in log

            # Space returns: appends resume by themselves, where the log ended.
            resize_tmpfs(small_disk, "64m")
            assert await append(stub, acked) == acked + 1
            acked += 1
            for _ in range(20):
                acked = await append(stub, acked)

            # The sealer, refused while full, catches up: every acked offset in whole segments.
            stream_dir = small_disk / "streams" / "full"

            def sealed() -> bool:
                return read_manifest(stream_dir).end_offsets().get(0, 0) >= acked

            await eventually(sealed, 60, "the sealer to seal every acked message")

            # The gauge clears once appends and seals have each written again (a seal round
            # that met the full disk counts too): by now both have.
            async def gauge_clear() -> bool:
                return await disk_full_gauge(cluster) == 0

            await eventually(gauge_clear, 30, "tamto_storage_disk_full to return to 0")
            leftovers = await asyncio.to_thread(lambda: list(small_disk.rglob("*.tmp")))
            assert not leftovers, "a temporary file was left behind"
            assert await read_all(stub, acked) == acked
    finally:
        cluster.kill9("storage")
