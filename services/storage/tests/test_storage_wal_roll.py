"""Once everything is sealed the WAL moves to a fresh file, so no sealed byte stays in it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from storage_testkit import OpenPartition, append_batches, check_batch, make_batch, wal_files

from tamto_storage.partition import Partition
from tamto_storage.wal import WalOptions, create_wal_file
from tamto_storage.wal_recovery import wal_file_name

SMALL_FILES = WalOptions(file_bytes=600)


async def sealed_partition(load: OpenPartition) -> Partition:
    """A partition holding offsets 0-5 in two batches, both sealed."""
    partition = await load()
    await partition.open(1)
    await partition.append(1, [make_batch(0), make_batch(3)])
    await partition.seal(1 << 20)
    return partition


async def test_a_fully_sealed_wal_keeps_only_an_empty_file_named_by_the_next_offset(
    load: OpenPartition, pdir: Path
) -> None:
    partition = await load(SMALL_FILES)
    await partition.open(1)
    await append_batches(partition, 1, range(0, 30, 3))
    await partition.seal(1 << 20)
    assert await partition.trim_wal() > 0
    [only] = wal_files(pdir)
    assert only.name == wal_file_name(30)
    assert only.stat().st_size == 0
    await partition.append(1, [make_batch(30)])  # appends continue in it
    assert only.stat().st_size > 0
    await partition.close()

    again = await load(SMALL_FILES)
    assert again.offsets().next_offset == 33
    [batch] = (await again.read(30, 0, 1 << 20)).batches
    check_batch(batch)


async def test_an_empty_wal_after_a_restart_still_knows_the_next_offset(
    load: OpenPartition, pdir: Path
) -> None:
    partition = await sealed_partition(load)
    await partition.trim_wal()
    await partition.close()
    again = await load()
    assert again.offsets().next_offset == 6
    assert again.offsets().start_offset == 0
    await again.open(2)
    assert await again.append(2, [make_batch(6)]) == 9


async def test_no_roll_while_an_append_is_unsealed_or_in_flight(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    await partition.append(1, [make_batch(0)])
    await partition.seal(1 << 20)
    await partition.append(1, [make_batch(3)])  # durable, not sealed
    assert partition.wal.roll(partition.segment_log.end_offset) is None
    await partition.seal(1 << 20)
    in_flight = asyncio.ensure_future(partition.append(1, [make_batch(6)]))
    await asyncio.sleep(0)  # placed, not yet written
    assert partition.wal.roll(partition.segment_log.end_offset) is None
    await in_flight


async def test_a_crash_between_creating_the_new_file_and_dropping_the_old(
    load: OpenPartition, pdir: Path
) -> None:
    partition = await sealed_partition(load)
    kept = pdir.parent / "kept.log"
    shutil.copy(wal_files(pdir)[0], kept)  # the old file, as a crash would leave it
    await partition.trim_wal()
    await partition.close()
    shutil.copy(kept, pdir / "_wal" / wal_file_name(0))
    create_wal_file(pdir / "_wal" / wal_file_name(6))  # idempotent: already there
    again = await load()
    assert again.offsets().next_offset == 6
    # The old file is wholly sealed (its batches end where the new one begins): the
    # load removes it, as it removes any read tail.
    assert [p.name for p in wal_files(pdir)] == [wal_file_name(6)]
    assert again.offsets().start_offset == 0
    await again.open(2)
    assert await again.append(2, [make_batch(6)]) == 9
