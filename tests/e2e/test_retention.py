"""Interest retention end to end: one unacknowledged message among a million acked ones
retains only itself, and is still delivered after storage and router are killed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tamto_sdk
import tamto_sdk.stream_config
from tamto_protocol.segment import read_manifest
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e

TOTAL = 1_000_000
BATCH = 10_000
#: The message left unacknowledged: not at a batch or segment edge.
KEPT = 654_321
#: Storage seals quickly, in segments of a few MiB, and keeps replaced files briefly.
STORAGE_ENV = {
    "TAMTO_STORAGE_SEAL_AGE_MS": "200",
    "TAMTO_STORAGE_SEAL_CHECK_MS": "100",
    "TAMTO_STORAGE_SEGMENT_BYTES": str(4 << 20),
    "TAMTO_STORAGE_WAL_FILE_BYTES": str(8 << 20),
    "TAMTO_STORAGE_RETENTION_GRACE_MS": "500",
}


@pytest.fixture
def retention_cluster(tamto_infra: Infra, tmp_path: Path) -> Iterator[TestCluster]:
    with TestCluster(tmp_path / "cluster", tamto_infra).running(
        {"storage": STORAGE_ENV}
    ) as cluster:
        yield cluster


def tree_bytes(directory: Path) -> int:
    """Bytes of every file under `directory` (files may vanish while we look)."""
    total = 0
    for path in directory.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


class PeakBytes:
    """Samples the bytes under a directory in the background and keeps the maximum."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.peak = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, await asyncio.to_thread(tree_bytes, self.directory))
            await asyncio.sleep(0.05)

    def __enter__(self) -> PeakBytes:
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        self.peak = max(self.peak, tree_bytes(self.directory))


def payload(i: int) -> bytes:
    return b"m%07d" % i


async def publish_all(client: tamto_sdk.Client, stream: str) -> None:
    async with client.producer(
        stream, max_batch_messages=BATCH, max_pending_messages=4 * BATCH, idempotent=False
    ) as producer:
        for i in range(TOTAL):
            if i == KEPT:
                await producer.send(b"the one left unacked", key=b"k", headers={"trace": "t1"})
            else:
                await producer.send(payload(i))
        await producer.flush()


async def consume_all_but_one(
    client: tamto_sdk.Client,
    stream: str,
    total: int = TOTAL,
    kept: int = KEPT,
    batch_size: int = BATCH,
) -> int:
    """Receive `total` messages, ack every one except offset `kept`; returns how many arrived."""
    received = 0
    async with client.consumer(stream, "main", credits=4 * batch_size) as consumer:
        while received < total:
            batch = await consumer.receive_batch(max_messages=batch_size, timeout_s=20)
            assert len(batch) > 0, f"stalled after {received} messages"
            received += len(batch)
            if batch.first_offset <= kept <= batch.last_offset:
                at = kept - batch.first_offset
                assert batch.offset_list()[at] == kept
                consumer.ack(batch.slice(0, at))
                consumer.ack(batch.slice(at + 1))
            else:
                consumer.ack(batch)
        await consumer.flush_acks(timeout_s=20)
    return received


async def test_one_unacked_message_among_a_million_retains_only_itself(
    retention_cluster: TestCluster,
) -> None:
    cluster = retention_cluster
    stream = f"retain-{uuid.uuid4().hex[:8]}"
    stream_dir = cluster.workdir / "storage" / "streams" / stream
    partition_dir = stream_dir / "partition=0"
    config = tamto_sdk.StreamConfig(
        retention_policy=tamto_sdk.stream_config.RetentionPolicy.INTEREST,
        ack_timeout_ms=600_000,  # the unacked message is not redelivered during the test
    )
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(stream, partitions=1, config=config)

        async def sealed() -> bool:
            return read_manifest(stream_dir).end_offsets().get(0, 0) >= TOTAL

        with PeakBytes(partition_dir) as sampler:
            await publish_all(client, stream)
            await eventually(sealed, 30, "every message sealed into segments", interval_s=0.05)
        manifest = read_manifest(stream_dir)
        # The sampler may miss the WAL's short-lived peak; the segments are on disk now.
        sealed_bytes = sum(segment.size_bytes for segment in manifest.segments)
        assert sealed_bytes > TOTAL, f"a million messages take real space, took {sealed_bytes}"
        peak = max(sampler.peak, sealed_bytes)
        assert len(manifest.segments) >= 3, "several segments, so whole ones can go"

        # "main" starts at the earliest offset: it needs every message until it acks it.
        assert await consume_all_but_one(client, stream) == TOTAL

        async def fallen() -> bool:
            return tree_bytes(partition_dir) < peak / 100

        await eventually(fallen, 30, f"disk use below 1% of the peak {peak}", interval_s=0.05)

    # What is left: one small segment, the empty WAL and the state files.
    async def merged() -> bool:
        return len(read_manifest(stream_dir).segments) == 1

    await eventually(merged, 30, "the leftovers merged into one segment", interval_s=0.05)
    manifest = read_manifest(stream_dir)
    [segment] = manifest.segments
    assert segment.rows == 2, "the unacked message, and the newest one (kept for reads)"
    assert segment.first_offset <= KEPT <= segment.last_offset == TOTAL - 1
    assert manifest.start_offsets[0] <= KEPT
    [wal] = (partition_dir / "_wal").iterdir()
    assert wal.stat().st_size == 0, "nothing sealed stays in the WAL"

    # kill -9 of storage and router: the unacked message is delivered again, alone.
    cluster.kill9("storage")
    cluster.kill9("router")
    cluster.start("storage", extra_env=STORAGE_ENV)
    cluster.start("router")
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        async with client.consumer(stream, "main") as consumer:
            redelivered = await consumer.receive_batch(max_messages=10, timeout_s=30)
            assert [m.offset for m in redelivered] == [KEPT]
            [message] = list(redelivered)
            assert message.payload == b"the one left unacked"
            assert message.key == b"k"
            assert message.headers.get("trace") == "t1"
            assert len(await consumer.receive_batch(max_messages=10, timeout_s=1)) == 0
            consumer.ack(message)
            await consumer.flush_acks(timeout_s=10)
        # New messages still get the next offsets.
        async with client.producer(stream) as producer:
            result = await producer.send_and_wait(b"after")
        assert result.offset == TOTAL
