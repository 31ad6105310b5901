"""Partition rules: epoch fencing, offsets, argument checks, cursors; and the store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from storage_testkit import DEFAULT_OPTIONS, OpenPartition, make_batch, wal_files

from tamto_common.errors import FailedPrecondition, InvalidArgument
from tamto_storage.model import Cursor, OffsetRange, StoredBatch
from tamto_storage.sealer import SealOptions
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions


async def test_open_returns_offsets_and_stores_the_epoch(load: OpenPartition, pdir: Path) -> None:
    partition = await load()
    offsets = await partition.open(3)
    assert (offsets.start_offset, offsets.next_offset) == (0, 0)
    assert (pdir / "_epoch").read_text().split()[0] == "3"
    await partition.append(3, [make_batch(0)])
    assert (await partition.open(3)).next_offset == 3  # reopening with the same epoch is fine


async def test_stale_epoch_is_fenced_and_stays_fenced_after_reopen(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    await partition.append(1, [make_batch(0)])
    await partition.open(2)  # a new owner
    with pytest.raises(FailedPrecondition, match="stale epoch 1 < current 2"):
        await partition.append(1, [make_batch(3)])
    with pytest.raises(FailedPrecondition, match="stale epoch 1 < current 2"):
        await partition.open(1)
    await partition.close()

    partition = await load()
    assert partition.epoch == 2
    with pytest.raises(FailedPrecondition, match="stale epoch 1 < current 2"):
        await partition.open(1)
    with pytest.raises(FailedPrecondition, match="stale epoch 1 < current 2"):
        await partition.append(1, [make_batch(3)])
    assert await partition.append(2, [make_batch(3)]) == 6


async def test_lost_epoch_file_falls_back_to_the_log(load: OpenPartition, pdir: Path) -> None:
    partition = await load()
    await partition.open(4)
    await partition.append(4, [make_batch(0)])
    await partition.close()
    (pdir / "_epoch").unlink()
    partition = await load()
    with pytest.raises(FailedPrecondition, match="stale epoch 3 < current 4"):
        await partition.open(3)


async def test_newer_epoch_must_open_first(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    with pytest.raises(FailedPrecondition, match="open the partition first"):
        await partition.append(2, [make_batch(0)])


async def test_base_offset_must_match_next_offset(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    await partition.append(1, [make_batch(0)])
    for base in (0, 2, 4):
        with pytest.raises(
            FailedPrecondition, match=f"base offset {base} does not match .* next offset 3"
        ):
            await partition.append(1, [make_batch(base)])
    assert partition.offsets().next_offset == 3


@pytest.mark.parametrize(
    ("batches", "message"),
    [
        ([], "at least one batch"),
        ([StoredBatch(0, 0, 1, b"x")], "count must be at least 1"),
        ([StoredBatch(0, 1, 1, b"")], "arrow_ipc must not be empty"),
        ([make_batch(0), make_batch(4)], "batch 1: base offset 4 does not follow .* ends at 3"),
    ],
)
async def test_bad_batches_are_invalid(
    load: OpenPartition, batches: list[StoredBatch], message: str
) -> None:
    partition = await load()
    await partition.open(1)
    with pytest.raises(InvalidArgument, match=message):
        await partition.append(1, batches)
    assert partition.offsets().next_offset == 0


async def test_cursor_commit_get_and_overwrite(load: OpenPartition, pdir: Path) -> None:
    partition = await load()
    await partition.open(1)
    assert await partition.get_cursor("billing") is None
    first = Cursor(10, (OffsetRange(12, 14), OffsetRange(20, 20)))
    await partition.commit_cursor(1, "billing", first)
    assert await partition.get_cursor("billing") == first
    second = Cursor(30)
    await partition.commit_cursor(1, "billing", second)
    path = pdir / "_cursors" / "billing.json"
    assert json.loads(path.read_text())["ack_floor"] == 30
    assert [p.name for p in path.parent.iterdir()] == ["billing.json"]  # no temp files left
    await partition.close()
    partition = await load()
    assert await partition.get_cursor("billing") == second
    assert await partition.get_cursor("other") is None


async def test_cursor_commit_is_fenced(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(2)
    with pytest.raises(FailedPrecondition, match="stale epoch 1 < current 2"):
        await partition.commit_cursor(1, "billing", Cursor(5))
    assert await partition.get_cursor("billing") is None


@pytest.mark.parametrize(
    ("cursor", "message"),
    [
        (Cursor(-1), "ack_floor must not be negative"),
        (Cursor(5, (OffsetRange(9, 7),)), "reversed"),
        (Cursor(5, (OffsetRange(5, 7),)), "must start above 5"),
        (Cursor(5, (OffsetRange(7, 9), OffsetRange(9, 10))), "must start above 9"),
    ],
)
async def test_bad_cursors_are_invalid(load: OpenPartition, cursor: Cursor, message: str) -> None:
    partition = await load()
    await partition.open(1)
    with pytest.raises(InvalidArgument, match=message):
        await partition.commit_cursor(1, "billing", cursor)
    with pytest.raises(InvalidArgument, match="illegal subscription name"):
        await partition.commit_cursor(1, "../escape", Cursor(1))


async def test_store_opens_each_partition_once_and_closes_all(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "data", DEFAULT_OPTIONS)
    a = await store.get("orders", 0)
    assert await store.get("orders", 0) is a
    b = await store.get("orders", 1)
    assert b is not a
    await a.open(1)
    await a.append(1, [make_batch(0)])
    assert (tmp_path / "data" / "streams" / "orders" / "partition=0" / "_wal").is_dir()
    with pytest.raises(InvalidArgument, match="illegal stream name"):
        await store.get("../etc", 0)
    with pytest.raises(InvalidArgument, match="stream name must not be empty"):
        await store.get("", 0)
    with pytest.raises(InvalidArgument, match="partition must be in 0-99999, got 100000"):
        await store.get("orders", 100_000)
    await store.close()
    store = PartitionStore(tmp_path / "data", DEFAULT_OPTIONS)
    assert (await store.get("orders", 0)).offsets().next_offset == 3
    await store.close()


async def test_offset_for_time_finds_the_first_batch_published_at_or_after(
    load: OpenPartition,
) -> None:
    partition = await load()
    await partition.open(1)
    first, second = make_batch(0), make_batch(3)
    await partition.append(1, [first, second])
    assert await partition.offset_for_time(0) == 0
    assert await partition.offset_for_time(first.publish_time_us) == 0
    assert await partition.offset_for_time(first.publish_time_us + 1) == 3
    assert await partition.offset_for_time(second.publish_time_us + 1) == 6, (
        "nothing newer: the end"
    )


async def test_a_stream_can_choose_its_own_wal_options(tmp_path: Path) -> None:
    asked: list[str] = []
    interval = WalOptions(group_commit=False, fsync_interval_s=0.02)

    async def options_for(stream: str, defaults: WalOptions) -> WalOptions:
        asked.append(stream)
        return interval if stream == "slow-but-cheap" else defaults

    store = PartitionStore(tmp_path, DEFAULT_OPTIONS, options_for)
    try:
        chosen = await store.get("slow-but-cheap", 0)
        default = await store.get("orders", 0)
        assert chosen.wal.options == interval
        assert default.wal.options == DEFAULT_OPTIONS
        assert sorted(asked) == ["orders", "slow-but-cheap"]
    finally:
        await store.close()


async def test_cursor_commits_accumulate_acks_and_never_move_back(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    await partition.commit_cursor(1, "s", Cursor(0, (OffsetRange(5, 9),)))
    # A late commit from a stale copy of the subscription knows less: nothing is lost.
    await partition.commit_cursor(1, "s", Cursor(0, (OffsetRange(2, 3),)))
    assert await partition.get_cursor("s") == Cursor(0, (OffsetRange(2, 3), OffsetRange(5, 9)))
    await partition.commit_cursor(1, "s", Cursor(2, (OffsetRange(4, 4),)))
    assert await partition.get_cursor("s") == Cursor(10)
    await partition.commit_cursor(1, "s", Cursor(0))
    assert await partition.get_cursor("s") == Cursor(10)


async def test_a_seek_replaces_a_cursor_and_delete_removes_it(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    await partition.commit_cursor(1, "s", Cursor(10))
    await partition.commit_cursor(1, "b~alice", Cursor(3))
    assert await partition.cursor_names() == ["b~alice", "s"]
    # Subscription administration's seek moves a cursor back, which a commit never does.
    await partition.commit_cursor(1, "s", Cursor(4, (OffsetRange(6, 6),)), replace=True)
    assert await partition.get_cursor("s") == Cursor(4, (OffsetRange(6, 6),))
    with pytest.raises(FailedPrecondition):
        await partition.delete_cursor(0, "s")
    assert await partition.delete_cursor(1, "s") is True
    assert await partition.delete_cursor(1, "s") is False
    assert await partition.get_cursor("s") is None
    assert await partition.cursor_names() == ["b~alice"]


async def test_disk_bytes_counts_the_wal_files(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    before, _ = await partition.disk_bytes()
    batch = make_batch(0, pad=1000)
    await partition.append(1, [batch])
    wal_bytes, segment_bytes = await partition.disk_bytes()
    assert wal_bytes - before >= len(batch.arrow_ipc)
    assert segment_bytes == 0


def _open_files_under(directory: Path) -> list[str]:
    """This process's open file descriptors pointing under `directory` (Linux)."""
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


async def test_a_deleted_streams_partitions_are_sealed_closed_and_forgotten(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    store = PartitionStore(data, DEFAULT_OPTIONS, seal_options=SealOptions(segment_bytes=1 << 20))
    store.start_sealer()  # a round may run meanwhile: the release waits for it
    try:
        first = await store.get("orders", 0)
        await first.open(1)
        await first.append(1, [make_batch(0), make_batch(3)])
        second = await store.get("orders", 1)
        await second.open(1)
        await second.append(1, [make_batch(0)])
        kept = await store.get("payments", 0)
        await kept.open(1)
        await kept.append(1, [make_batch(0, pad=100)])
        kept_bytes = kept.unsealed_bytes
        assert store.unsealed_bytes() > kept_bytes > 0
        orders_dir = data / "streams" / "orders"
        assert _open_files_under(orders_dir), "the WAL writers hold files open"

        await store.release_stream("orders")

        assert {p.id.stream for p in store.loaded()} == {"payments"}
        assert store.unsealed_bytes() == kept_bytes, "only the stream kept is left unsealed"
        assert _open_files_under(orders_dir) == []
        for partition in (first, second):
            assert partition.unsealed_bytes == 0
            assert partition.segment_log.end_offset == partition.offsets().next_offset
            assert all(f.stat().st_size == 0 for f in wal_files(partition.directory)), (
                "no WAL file holds data: it is all in segments"
            )
        assert kept.unsealed_bytes == kept_bytes, "the other stream is not sealed early"
        again = await store.get("orders", 0)
        assert again is not first, "used again, it loads anew"
        assert again.offsets().next_offset == 6
        assert [b.base_offset for b in (await again.read(0, 0, 1 << 20)).batches] == [0, 3]
        await store.release_stream("never-used")  # nothing open: nothing to do
    finally:
        await store.close()
