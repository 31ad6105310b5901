"""Zero-filled WAL tails: what a power cut leaves when a file grew but its newest blocks were
never written. Recovery truncates them like any torn tail and never serves them;
zeros followed by a valid frame stay corruption."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from storage_testkit import OpenPartition, check_batch, frame_position, make_batch, wal_files

from tamto_common.errors import DataLoss
from tamto_storage.frame import HEADER_SIZE


async def write_four(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    for base in range(0, 12, 3):
        await partition.append(1, [make_batch(base)])
    await partition.close()


@pytest.mark.parametrize(
    "damage",
    ["zeros-after-the-log", "last-frame-body-zeroed", "last-frame-all-zeros"],
)
async def test_a_zero_filled_tail_is_truncated_and_never_served(
    load: OpenPartition, pdir: Path, damage: str
) -> None:
    await write_four(load)
    (path,) = wal_files(pdir)
    last = frame_position([make_batch(b) for b in range(0, 12, 3)], 3)
    size = path.stat().st_size
    with path.open("r+b") as f:
        if damage == "zeros-after-the-log":
            f.seek(size)
            f.write(bytes(5000))
            good_end, next_offset = size, 12
        elif damage == "last-frame-body-zeroed":
            f.seek(last + HEADER_SIZE)
            f.write(bytes(size - last - HEADER_SIZE + 4096))
            good_end, next_offset = last, 9
        else:
            f.seek(last)
            f.write(bytes(size - last + 100))
            good_end, next_offset = last, 9
    partition = await load()
    assert path.stat().st_size == good_end
    assert partition.offsets().next_offset == next_offset
    result = await partition.read(0, 0, 1 << 30)
    assert [b.base_offset for b in result.batches] == list(range(0, next_offset, 3))
    for batch in result.batches:
        check_batch(batch)
    await partition.open(2)
    assert await partition.append(2, [make_batch(next_offset)]) == next_offset + 3


async def test_zeros_followed_by_a_valid_frame_are_corruption(
    load: OpenPartition, pdir: Path
) -> None:
    await write_four(load)
    (path,) = wal_files(pdir)
    batches = [make_batch(b) for b in range(0, 12, 3)]
    second = frame_position(batches, 1)
    third = frame_position(batches, 2)
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(second)
        f.write(bytes(third - second))  # a whole frame zeroed, acked frames after it
    partition = await load()
    assert path.stat().st_size == size, "acknowledged frames are never cut away"
    with contextlib.suppress(DataLoss):
        result = await partition.read(0, 0, 1 << 30)
        assert 3 not in [b.base_offset for b in result.batches], "zeros served as a batch"
        for batch in result.batches:
            check_batch(batch)
