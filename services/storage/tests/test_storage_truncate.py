"""Truncating a partition's WAL tail for its owner (a replica's entries past a
recovered ledger's end, docs/cluster.md section 2): durable, at batch
boundaries, never of sealed offsets or of entries the current epoch wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_testkit import (
    OpenPartition,
    append_batches,
    check_batch,
    make_batch,
    payloads,
    read_all,
    wal_files,
)

from tamto_common.errors import FailedPrecondition
from tamto_storage.model import StoredBatch
from tamto_storage.wal import WalOptions
from tamto_storage.wal_recovery import wal_file_name

SMALL_FILES = WalOptions(file_bytes=600)  # one frame of `make_batch` each
TWO_FRAMES = WalOptions(file_bytes=3000)  # two frames each: files 0, 6, 12, ...


def other_batch(base_offset: int) -> StoredBatch:
    """A batch at `base_offset` whose payloads are not the ones `make_batch` stores there."""
    theirs = make_batch(base_offset + 1000)
    return StoredBatch(base_offset, theirs.count, theirs.publish_time_us, theirs.arrow_ipc)


async def test_a_tail_spanning_wal_files_is_dropped_durably_and_rewritten(
    load: OpenPartition, pdir: Path
) -> None:
    partition = await load(TWO_FRAMES)
    await partition.open(1)
    await append_batches(partition, 1, range(0, 30, 3))
    assert len(wal_files(pdir)) == 5
    await partition.open(2)  # the new owner
    assert await partition.truncate(2, 9) == 9
    assert partition.offsets().next_offset == 9
    assert [b.end_offset for b in await read_all(partition, 0)][-1] == 9
    # Cut inside the file of 6-11 after its first frame; the later files are gone.
    assert [int(f.stem) for f in wal_files(pdir)] == [0, 6]
    assert wal_files(pdir)[1].stat().st_size * 2 == wal_files(pdir)[0].stat().st_size
    await partition.append(2, [other_batch(9)])
    await partition.close()

    again = await load(TWO_FRAMES)
    assert again.offsets().next_offset == 12
    batches = await read_all(again, 0)
    for batch in batches[:-1]:
        check_batch(batch)
    assert payloads(batches[-1]) == payloads(other_batch(9))


async def test_truncating_at_a_files_first_frame_keeps_it_empty_with_the_next_offset(
    load: OpenPartition, pdir: Path
) -> None:
    partition = await load(SMALL_FILES)
    await partition.open(1)
    await append_batches(partition, 1, range(0, 30, 3))
    cut = int(wal_files(pdir)[1].stem)  # the base offset of the second file's first frame
    await partition.open(2)
    assert await partition.truncate(2, cut) == cut
    last = wal_files(pdir)[-1]
    assert last.name == wal_file_name(cut)
    assert last.stat().st_size == 0
    await partition.close()

    again = await load(SMALL_FILES)
    assert again.offsets().next_offset == cut
    await again.open(2)
    assert await again.append(2, [make_batch(cut)]) == cut + 3


async def test_a_torn_frame_after_the_tail_goes_with_it(load: OpenPartition, pdir: Path) -> None:
    partition = await load()
    await partition.open(1)
    await partition.append(1, [make_batch(0), make_batch(3), make_batch(6)])
    await partition.close()
    with wal_files(pdir)[-1].open("ab") as f:
        f.write(b"\x07" * 20)  # a frame torn by a crash mid-write
    partition = await load()
    assert partition.offsets().next_offset == 9
    await partition.open(2)
    assert await partition.truncate(2, 3) == 3
    await partition.append(2, [other_batch(3)])
    await partition.close()

    again = await load()
    assert again.offsets().next_offset == 6
    batches = await read_all(again, 0)
    check_batch(batches[0])
    assert payloads(batches[1]) == payloads(other_batch(3))


async def test_truncation_is_refused_where_it_would_drop_what_must_stay(
    load: OpenPartition,
) -> None:
    partition = await load()
    await partition.open(1)
    await partition.append(1, [make_batch(0), make_batch(3)])
    await partition.seal(1 << 20)  # offsets 0-5 are sealed
    await partition.append(1, [make_batch(6), make_batch(9)])
    await partition.open(2)
    with pytest.raises(FailedPrecondition, match="stale epoch 1 < current 2"):
        await partition.truncate(1, 9)
    with pytest.raises(FailedPrecondition, match="open the partition first"):
        await partition.truncate(3, 9)
    with pytest.raises(FailedPrecondition, match="offsets below 6 are sealed"):
        await partition.truncate(2, 3)
    with pytest.raises(FailedPrecondition, match="inside the batch of offsets 6-8"):
        await partition.truncate(2, 7)
    assert await partition.truncate(2, 12) == 12  # at the end: nothing to drop
    await partition.append(2, [make_batch(12)])
    with pytest.raises(FailedPrecondition, match="offset 12 was written with the current epoch"):
        await partition.truncate(2, 9)
    assert partition.offsets().next_offset == 15  # every refusal left the log whole
    for batch in await read_all(partition, 0):
        check_batch(batch)
