"""Sealing WAL batches into Parquet segments: schema, names, reads, manifest, retention."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from storage_testkit import (
    PUBLISH_TIME_US,
    OpenPartition,
    check_batch,
    make_batch,
    payload_for,
    read_all,
    wal_files,
)

from tamto_common.errors import InvalidArgument
from tamto_protocol.segment import SEGMENT_SCHEMA, read_manifest, segment_file_name
from tamto_storage.model import PartitionId, StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.sealer import SealOptions
from tamto_storage.segments import write_segment
from tamto_storage.store import PartitionStore, partition_dir
from tamto_storage.wal import WalOptions

SMALL_FILES = WalOptions(file_bytes=600)  # a few batches per WAL file


async def fill(partition: Partition, batches: int, count: int = 3) -> list[StoredBatch]:
    await partition.open(1)
    written = []
    base = partition.offsets().next_offset
    for _ in range(batches):
        batch = make_batch(base, count)
        await partition.append(1, [batch])
        written.append(batch)
        base += count
    return written


async def test_seal_writes_the_segment_schema_with_offsets_and_publish_times(
    load: OpenPartition, pdir: Path
) -> None:
    partition = await load()
    await fill(partition, 4)
    [segment] = await partition.seal(1 << 20)
    assert segment.path == pdir / segment_file_name(0, 11)
    table = pq.read_table(segment.path)
    assert table.schema.equals(SEGMENT_SCHEMA, check_metadata=False)
    assert table.schema.metadata[b"tamto.schema_version"] == b"1"
    assert table.column("offset").to_pylist() == list(range(12))
    times = [t.timestamp() * 1e6 for t in table.column("publish_time").to_pylist()]
    assert times == [PUBLISH_TIME_US + (o // 3) * 3 for o in range(12)]
    assert table.column("payload").to_pylist() == [payload_for(o) for o in range(12)]
    assert segment.entry.min_publish_time_us == PUBLISH_TIME_US
    assert segment.entry.max_publish_time_us == PUBLISH_TIME_US + 9


async def test_segments_end_on_batch_boundaries_near_the_size_target(load: OpenPartition) -> None:
    partition = await load()
    batches = await fill(partition, 6)
    size = len(batches[0].arrow_ipc)
    segments = await partition.seal(2 * size)
    assert [(s.first_offset, s.end_offset) for s in segments] == [(0, 6), (6, 12), (12, 18)]
    assert await partition.seal(2 * size) == [], "nothing new: nothing sealed"


def test_sealing_the_same_offsets_twice_writes_the_same_file(tmp_path: Path) -> None:
    batches = [make_batch(0), make_batch(3)]
    first = write_segment(0, tmp_path, batches)
    content = first.path.read_bytes()
    second = write_segment(0, tmp_path, batches)
    assert second.path == first.path
    assert second.path.read_bytes() == content
    assert [p.name for p in tmp_path.iterdir()] == [first.path.name], "no temporary file left"


async def test_reads_by_offset_serve_segments_and_the_wal(load: OpenPartition, pdir: Path) -> None:
    partition = await load(SMALL_FILES)
    await fill(partition, 10)
    files_before = wal_files(pdir)
    assert len(files_before) > 2
    await partition.seal(1 << 20)
    removed = await partition.trim_wal()
    assert removed == len(files_before), "every WAL file is covered"
    assert [p.name for p in wal_files(pdir)] == ["00000000000000000030.log"], "a fresh one"
    assert partition.wal.start_offset == 30
    await fill(partition, 2)  # unsealed, in the WAL
    batches = await read_all(partition, 0)
    offsets = [o for b in batches for o in range(b.base_offset, b.end_offset)]
    assert offsets == list(range(36))
    for batch in batches:
        check_batch(batch)
    middle = await partition.read(4, 2, 1 << 20)
    assert middle.batches[0].base_offset <= 4 < middle.next_offset
    assert partition.offsets().start_offset == 0


async def test_segments_and_a_trimmed_wal_survive_a_reload(load: OpenPartition) -> None:
    partition = await load(SMALL_FILES)
    await fill(partition, 10)
    await partition.seal(1 << 20)
    await partition.trim_wal()
    await partition.close()
    again = await load(SMALL_FILES)
    assert again.offsets().start_offset == 0
    assert again.offsets().next_offset == 30
    assert [o for b in await read_all(again, 0) for o in range(b.base_offset, b.end_offset)] == (
        list(range(30))
    )
    assert await again.seal(1 << 20) == [], "already sealed: the segment on disk is reused"


async def test_offset_for_time_looks_into_segments(load: OpenPartition) -> None:
    partition = await load()
    await fill(partition, 4)
    await partition.seal(1 << 20)
    await partition.trim_wal()
    assert await partition.offset_for_time(PUBLISH_TIME_US + 4) == 6
    assert await partition.offset_for_time(0) == 0


async def test_seal_is_due_by_size_or_by_age(load: OpenPartition) -> None:
    partition = await load()
    assert not partition.seal_due(time.monotonic() + 3600, 1, 1.0), "nothing to seal"
    batches = await fill(partition, 2)
    now = time.monotonic()
    size = sum(len(b.arrow_ipc) for b in batches)
    assert not partition.seal_due(now, size + 1, 60.0)
    assert partition.seal_due(now, size, 60.0), "size reached"
    assert partition.seal_due(now + 60.0, size + 1, 60.0), "age reached"
    await partition.seal(1 << 20)
    assert not partition.seal_due(now + 3600, 1, 1.0), "all sealed"


async def test_the_store_counts_what_is_not_sealed_yet(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "data", WalOptions(), seal_options=SealOptions())
    try:
        assert store.unsealed_bytes() == 0
        first = await store.get("orders", 0)
        second = await store.get("orders", 1)
        first_bytes = sum(len(b.arrow_ipc) for b in await fill(first, 2))
        second_bytes = sum(len(b.arrow_ipc) for b in await fill(second, 3))
        assert store.unsealed_bytes() == first_bytes + second_bytes
        await first.seal(1 << 20)
        assert store.unsealed_bytes() == second_bytes
        await second.seal(1 << 20)
        assert store.unsealed_bytes() == 0
    finally:
        await store.close()


T_US = 1_800_000_000_000_000


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_store_seals_on_close_records_the_manifest_and_reconciles_on_load(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    store = PartitionStore(data, WalOptions(), seal_options=SealOptions())
    partition = await store.get("orders", 1)
    await fill(partition, 3)
    await store.close()
    manifest = read_manifest(data / "streams" / "orders")
    assert [(s.partition, s.first_offset, s.last_offset) for s in manifest.segments] == [(1, 0, 8)]
    # A crash between renaming a segment into place and recording it: the next load records it.
    pdir = partition_dir(data, PartitionId("orders", 1))
    write_segment(1, pdir, [make_batch(9)])  # as if sealed, then killed
    store = PartitionStore(data, WalOptions(), seal_options=SealOptions())
    try:
        await store.get("orders", 1)
        manifest = read_manifest(data / "streams" / "orders")
        assert [s.first_offset for s in manifest.segments] == [0, 9]
    finally:
        await store.close()


async def test_retention_expires_whole_segments_and_deletes_files_after_the_grace(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    clock = FakeClock()

    async def retention(stream: str) -> tuple[int, int]:
        return 10_000, 0  # keep ten seconds

    options = SealOptions(segment_bytes=1, retention_grace_s=60)
    store = PartitionStore(
        data, WalOptions(), seal_options=options, retention_for=retention, clock=clock
    )
    sealer = store.sealer
    assert sealer is not None
    try:
        partition = await store.get("orders", 0)
        await partition.open(1)
        for base in (0, 3, 6):  # published 0 s, 3 s and 6 s after T
            batch = replace(make_batch(base), publish_time_us=T_US + base * 1_000_000)
            await partition.append(1, [batch])
        clock.now = T_US / 1e6  # nothing is old yet
        await sealer.seal_all()
        segments = partition.segment_log.segments
        assert len(segments) == 3
        clock.now = T_US / 1e6 + 15  # the first two are more than 10 s old
        await sealer.run_once()
        stream_dir = data / "streams" / "orders"
        manifest = read_manifest(stream_dir)
        assert [s.first_offset for s in manifest.segments] == [6]
        assert manifest.start_offsets == {0: 6}
        assert partition.offsets().start_offset == 6
        with pytest.raises(InvalidArgument, match="below the partition's start offset 6"):
            await partition.read(0, 0, 1 << 20)
        assert all(s.path.exists() for s in segments), "files stay during the grace period"
        clock.now += 60
        await sealer.run_once()
        assert [s.path.exists() for s in segments] == [False, False, True]
        # Meanwhile the third became too old as well: expired, its file kept for now.
        assert [e.file for e in read_manifest(stream_dir).expired] == [
            f"partition=0/{segments[2].path.name}"
        ]
    finally:
        await store.close()


async def test_the_sealer_loop_stops_with_the_store(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "data", WalOptions(), seal_options=SealOptions())
    store.start_sealer()
    sealer = store.sealer
    assert sealer is not None
    assert sealer._task is not None
    task = sealer._task
    await store.close()
    assert task.done()
    assert not task.cancelled()
