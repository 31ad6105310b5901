"""The read tail: sealed WAL files a partition keeps, within a byte budget, so reads of
recent offsets get the batches as stored instead of decoding Parquet; retention still
removes what it removes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from storage_testkit import (
    PUBLISH_TIME_US,
    OpenPartition,
    check_batch,
    flip_byte,
    make_batch,
    read_all,
    wal_files,
)

from tamto_common.errors import InvalidArgument
from tamto_storage.frame import HEADER_SIZE
from tamto_storage.model import PartitionId, StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.sealer import Retention, SealOptions
from tamto_storage.store import PartitionStore, partition_dir
from tamto_storage.wal import WalOptions
from tamto_storage.wal_recovery import wal_file_name

ONE_BATCH_PER_FILE = WalOptions(file_bytes=1)


async def fill(partition: Partition, batches: int) -> list[StoredBatch]:
    """Append `batches` batches of three messages; each lands in a WAL file of its own."""
    await partition.open(1)
    written = [make_batch(base) for base in range(0, 3 * batches, 3)]
    for batch in written:
        await partition.append(1, [batch])
    return written


def sizes(files: list[Path]) -> list[int]:
    return [f.stat().st_size for f in files]


async def test_trimming_keeps_the_newest_sealed_files_that_fit_in_the_budget(
    load: OpenPartition, pdir: Path
) -> None:
    partition = await load(ONE_BATCH_PER_FILE)
    written = await fill(partition, 10)
    files = wal_files(pdir)
    assert len(files) == 10
    await partition.seal(1 << 20)
    budget = sum(sizes(files[-3:]))
    assert await partition.trim_wal(budget) == 7
    kept = wal_files(pdir)
    assert [f.name for f in kept] == [*(f.name for f in files[-3:]), wal_file_name(30)]
    assert partition.wal.start_offset == 21
    assert partition.offsets().start_offset == 0, "the segments still hold everything"
    # The tail serves its offsets with the very bytes that were appended...
    tail = await partition.read(21, 0, 1 << 20)
    assert [b.arrow_ipc for b in tail.batches] == [b.arrow_ipc for b in written[7:]]
    # ...and the segments serve what is below it.
    below = await partition.read(0, 3, 1 << 20)
    assert below.batches[0].base_offset == 0
    check_batch(below.batches[0])
    # One byte less and only two files fit.
    assert await partition.trim_wal(sum(sizes(files[-2:]))) == 1
    assert partition.wal.start_offset == 24


async def test_a_batch_read_from_the_tail_outlives_the_removal_of_its_file(
    load: OpenPartition, pdir: Path
) -> None:
    """Reads return views of the WAL file's mapping: removing the file while a read
    result is still in use (being sent) must neither fail nor change its bytes."""
    partition = await load(ONE_BATCH_PER_FILE)
    written = await fill(partition, 4)
    await partition.seal(1 << 20)
    assert await partition.trim_wal(1 << 20) == 0
    held = (await partition.read(3, 0, 1 << 20)).batches
    assert await partition.trim_wal(0) == 4
    assert not [f for f in wal_files(pdir) if f.name == wal_file_name(3)]
    assert [bytes(b.arrow_ipc) for b in held] == [b.arrow_ipc for b in written[1:]]
    for batch in held:
        check_batch(batch)


async def test_no_budget_removes_every_sealed_file(load: OpenPartition, pdir: Path) -> None:
    partition = await load(ONE_BATCH_PER_FILE)
    await fill(partition, 4)
    await partition.seal(1 << 20)
    assert await partition.trim_wal(0) == 4
    assert [f.name for f in wal_files(pdir)] == [wal_file_name(12)]


async def test_a_reload_drops_the_tail_and_keeps_the_log_whole(
    load: OpenPartition, pdir: Path
) -> None:
    """Opening checks WAL files frame by frame: a tail kept across restarts would slow
    every open by its size, and damage in it would stop the log."""
    partition = await load(ONE_BATCH_PER_FILE)
    await fill(partition, 6)
    await partition.seal(1 << 20)
    await partition.trim_wal(sum(sizes(wal_files(pdir)[-2:])))
    await partition.append(1, [make_batch(18)])  # unsealed, in the file appends go to
    assert len(wal_files(pdir)) == 3
    flip_byte(wal_files(pdir)[0], 40)  # damage in the tail is never looked at again
    await partition.close()
    again = await load(ONE_BATCH_PER_FILE)
    assert [f.name for f in wal_files(pdir)] == [wal_file_name(18)]
    assert again.wal.corruption is None
    assert again.offsets() == partition.offsets()
    assert offsets_read(await read_all(again, 0)) == list(range(21))
    await again.open(2)
    assert await again.append(2, [make_batch(21)]) == 24


async def test_a_damaged_tail_frame_is_read_from_the_segments(
    load: OpenPartition, pdir: Path
) -> None:
    partition = await load(ONE_BATCH_PER_FILE)
    await fill(partition, 6)
    await partition.seal(1 << 20)
    await partition.trim_wal(1 << 20)
    assert partition.wal.start_offset == 0, "every sealed file is in the tail"
    flip_byte(wal_files(pdir)[2], HEADER_SIZE + 10)  # the body of the batch at 6
    result = await partition.read(6, 3, 1 << 20)
    assert [(b.base_offset, b.end_offset) for b in result.batches] == [(6, 9)]
    check_batch(result.batches[0])
    assert partition.wal.corruption is None, "sealed data is whole: the log is not corrupt"
    assert [f.name for f in wal_files(pdir)] == [wal_file_name(18)], "the tail went"
    assert await partition.append(1, [make_batch(18)]) == 21


def offsets_read(batches: list[StoredBatch]) -> list[int]:
    for batch in batches:
        check_batch(batch)
    return [o for b in batches for o in range(b.base_offset, b.end_offset)]


class Clock:
    def __init__(self, now_s: float) -> None:
        self.now = now_s

    def __call__(self) -> float:
        return self.now


def store_with(tmp_path: Path, retention: Retention, clock: Clock) -> PartitionStore:
    async def retention_for(stream: str) -> Retention:
        return retention

    return PartitionStore(
        tmp_path / "data",
        ONE_BATCH_PER_FILE,
        seal_options=SealOptions(segment_bytes=1, retention_grace_s=60, wal_tail_bytes=1 << 20),
        retention_for=retention_for,
        clock=clock,
    )


async def test_segments_expired_by_retention_take_their_tail_files_with_them(
    tmp_path: Path,
) -> None:
    clock = Clock(PUBLISH_TIME_US / 1e6)
    store = store_with(tmp_path, Retention(retention_ms=10_000), clock)
    sealer = store.sealer
    assert sealer is not None
    pdir = partition_dir(tmp_path / "data", PartitionId("orders", 0))
    try:
        partition = await store.get("orders", 0)
        await partition.open(1)
        for base in (0, 3, 6):  # published 0 s, 3 s and 6 s after the clock's start
            batch = replace(make_batch(base), publish_time_us=PUBLISH_TIME_US + base * 1_000_000)
            await partition.append(1, [batch])
        await sealer.seal_all()
        assert len(wal_files(pdir)) == 4, "all three sealed files stay in the tail"
        clock.now += 15  # the first two are more than 10 s old
        await sealer.run_once()
        assert partition.offsets().start_offset == 6
        assert [f.name for f in wal_files(pdir)] == [wal_file_name(6), wal_file_name(9)]
        with pytest.raises(InvalidArgument, match="below the partition's start offset 6"):
            await partition.read(0, 0, 1 << 20)
    finally:
        await store.close()


async def test_interest_retention_keeps_no_tail(tmp_path: Path) -> None:
    """What every subscription acked leaves the segments; a tail would still hold it."""
    store = store_with(tmp_path, Retention(interest=True), Clock(PUBLISH_TIME_US / 1e6))
    sealer = store.sealer
    assert sealer is not None
    pdir = partition_dir(tmp_path / "data", PartitionId("orders", 0))
    try:
        partition = await store.get("orders", 0)
        await fill(partition, 3)
        await sealer.seal_all()
        assert [f.name for f in wal_files(pdir)] == [wal_file_name(9)]
        assert partition.wal.start_offset == 9
    finally:
        await store.close()


async def test_the_node_keeps_the_newest_sealed_files_of_all_partitions_within_its_budget(
    tmp_path: Path,
) -> None:
    """Partition 0 was written before partition 1: its files are the first to go."""
    data = tmp_path / "data"
    file_bytes = len(make_batch(0).arrow_ipc) + HEADER_SIZE
    options = SealOptions(segment_bytes=1, wal_tail_bytes=3 * file_bytes)
    store = PartitionStore(data, ONE_BATCH_PER_FILE, seal_options=options)
    sealer = store.sealer
    assert sealer is not None
    try:
        for number, published_s in ((0, 0), (1, 100)):
            partition = await store.get("orders", number)
            await partition.open(1)
            for base in range(0, 12, 3):
                batch = make_batch(base)
                at_us = PUBLISH_TIME_US + (published_s + base) * 1_000_000
                await partition.append(1, [replace(batch, publish_time_us=at_us)])
        assert all(f.stat().st_size == file_bytes for f in tail_files(data, 0)[:-1])
        await sealer.seal_all()
        # The three newest sealed files are partition 1's last three; partition 0's all go.
        assert [f.name for f in tail_files(data, 1)] == [
            *(wal_file_name(base) for base in (3, 6, 9)),
            wal_file_name(12),
        ]
        assert [f.name for f in tail_files(data, 0)] == [wal_file_name(12)]
    finally:
        await store.close()


def tail_files(data: Path, partition: int) -> list[Path]:
    return wal_files(partition_dir(data, PartitionId("orders", partition)))


async def test_the_sealed_file_summaries_follow_appends_seals_and_trims(
    load: OpenPartition, pdir: Path
) -> None:
    partition = await load(ONE_BATCH_PER_FILE)
    written = await fill(partition, 6)
    assert partition.sealed_wal_files() == [], "nothing sealed yet"
    await partition.seal(1 << 20)
    files = wal_files(pdir)
    assert [(f.first_offset, f.end_offset, f.size) for f in partition.sealed_wal_files()] == [
        (b.base_offset, b.end_offset, path.stat().st_size)
        for b, path in zip(written, files, strict=True)
    ]
    assert [f.newest_publish_us for f in partition.sealed_wal_files()] == [
        b.publish_time_us for b in written
    ]
    await partition.trim_wal(sum(sizes(files[-2:])))
    assert [f.first_offset for f in partition.sealed_wal_files()] == [12, 15]
