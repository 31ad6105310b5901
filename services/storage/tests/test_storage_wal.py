"""The WAL through a partition: durability, group commit, recovery, corruption, reads."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time
import zlib
from pathlib import Path

import pytest
from storage_testkit import (
    OpenPartition,
    check_batch,
    flip_byte,
    frame_position,
    make_batch,
    offsets_of,
    wal_files,
)

from tamto_common.errors import DataLoss, InvalidArgument
from tamto_storage import wal_commit as wal_module
from tamto_storage.frame import HEADER_SIZE, crc_matches, decode_header, encode_header
from tamto_storage.model import StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.wal import WalOptions
from tamto_storage.wal_recovery import wal_file_name

BIG = 1 << 30


async def append_all(partition_load: OpenPartition, n: int, count: int = 3) -> list[int]:
    partition = await partition_load()
    await partition.open(1)
    bases = []
    for i in range(n):
        base = i * count
        await partition.append(1, [make_batch(base, count)])
        bases.append(base)
    await partition.close()
    return bases


def test_the_frame_checksum_is_zlibs_crc32_as_in_files_written_before() -> None:
    """The CRC is computed with ISA-L for speed; its value must stay zlib's CRC-32
    over header bytes 8..36 and the body, or WAL files already on disk fail it."""
    body = os.urandom(300_000)  # large enough for ISA-L's vectorised path
    header = encode_header(base_offset=7, count=3, publish_time_us=11, epoch=2, body=body)
    covered = struct.pack("<qIqq", 7, 3, 11, 2)
    assert decode_header(header).crc == zlib.crc32(body, zlib.crc32(covered))

    written_before = struct.pack("<II", len(body), zlib.crc32(body, zlib.crc32(covered)))
    assert crc_matches(written_before + covered, memoryview(body))
    assert not crc_matches(written_before + covered, body[:-1] + bytes([body[-1] ^ 1]))


async def test_acked_batches_survive_reopen(load: OpenPartition) -> None:
    bases = await append_all(load, 5)
    partition = await load()
    assert partition.offsets().next_offset == 15
    assert partition.offsets().start_offset == 0
    result = await partition.read(0, 0, BIG)
    assert offsets_of(result.batches) == bases
    for batch in result.batches:
        check_batch(batch)
        assert batch.publish_time_us == make_batch(batch.base_offset).publish_time_us
    assert result.next_offset == 15


async def test_concurrent_appends_share_fsyncs_and_keep_order(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    n = 40
    # Each coroutine reserves its offsets when it first runs, in creation order.
    ends = await asyncio.gather(*(partition.append(1, [make_batch(i * 2, 2)]) for i in range(n)))
    assert ends == [(i + 1) * 2 for i in range(n)]
    assert 1 <= partition.wal.fsyncs < n
    result = await partition.read(0, 0, BIG)
    assert offsets_of(result.batches) == [i * 2 for i in range(n)]
    for batch in result.batches:
        check_batch(batch)


@pytest.mark.parametrize(
    ("fsync_s", "pad", "inline"), [(0.0001, 0, True), (0.0001, 300_000, False), (0.01, 0, False)]
)
async def test_small_groups_commit_on_the_loop_while_fsyncs_are_fast(
    load: OpenPartition, monkeypatch: pytest.MonkeyPatch, fsync_s: float, pad: int, inline: bool
) -> None:
    """A commit skips the hand-off to a worker thread only for a small group on a disk
    whose fsyncs have been fast; a large group or a slow disk keeps it off the loop."""
    threads: list[threading.Thread] = []

    def timed_fsync(fd: int) -> float:
        os.fsync(fd)
        threads.append(threading.current_thread())
        return fsync_s

    monkeypatch.setattr(wal_module, "_timed_fsync", timed_fsync)
    partition = await load()
    await partition.open(1)
    for i in range(12):  # the first commits teach the WAL how fast its fsyncs are
        await partition.append(1, [make_batch(i * 3, pad=pad // 3)])
    last_commit = threads[-1]
    assert (last_commit is threading.main_thread()) is inline
    assert threads[0] is not threading.main_thread(), "no commit on the loop before one is timed"
    await partition.close()
    reopened = await load()
    assert offsets_of((await reopened.read(0, 0, BIG)).batches) == [3 * i for i in range(12)]


async def test_a_lone_append_commits_in_the_call_and_back_to_back_ones_group(
    load: OpenPartition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append that comes well after the last commit, with nothing queued, is on disk
    when `Wal.append` returns (no hand-off to the writer task); appends coming right
    after a commit still go to the writer and share fsyncs, in order."""
    now = [0.0]

    def timed_fsync(fd: int) -> float:
        os.fsync(fd)
        return 0.0001

    monkeypatch.setattr(wal_module, "_timed_fsync", timed_fsync)
    monkeypatch.setattr(wal_module, "_clock", lambda: now[0])
    partition = await load()
    await partition.open(1)
    for i in range(12):  # the first commits teach the WAL how fast its fsyncs are
        now[0] += 1.0
        await partition.append(1, [make_batch(i * 3)])
    now[0] += 1.0
    fsyncs = partition.wal.fsyncs
    done = partition.wal.append([make_batch(36)], 1)
    assert done.done()
    assert done.exception() is None
    assert partition.wal.fsyncs == fsyncs + 1
    # The clock stands still from here: every append comes just after a commit.
    ends = await asyncio.gather(*(partition.append(1, [make_batch(39 + 3 * i)]) for i in range(10)))
    assert ends == [42 + 3 * i for i in range(10)]
    assert partition.wal.fsyncs - (fsyncs + 1) < 10
    await partition.close()
    reopened = await load()
    assert offsets_of((await reopened.read(0, 0, BIG)).batches) == [3 * i for i in range(23)]


async def test_one_append_of_several_batches(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    assert await partition.append(1, [make_batch(0, 2), make_batch(2, 5), make_batch(7, 1)]) == 8
    assert partition.wal.fsyncs == 1
    result = await partition.read(3, 0, BIG)
    assert offsets_of(result.batches) == [2, 7]


async def test_interval_mode_acks_after_a_delayed_shared_fsync(load: OpenPartition) -> None:
    interval = 0.2
    partition = await load(WalOptions(group_commit=False, fsync_interval_s=interval))
    await partition.open(1)
    started = time.monotonic()
    for i in range(3):  # sequential: each waits for its own fsync, spaced by the interval
        await partition.append(1, [make_batch(i * 3)])
    assert time.monotonic() - started >= 2 * interval * 0.9
    await asyncio.gather(*(partition.append(1, [make_batch(9 + i * 3)]) for i in range(10)))
    assert partition.wal.fsyncs <= 5
    result = await partition.read(0, 0, BIG)
    assert offsets_of(result.batches) == [i * 3 for i in range(13)]


@pytest.mark.parametrize("cut", [1, HEADER_SIZE - 1, HEADER_SIZE + 5, -1])
async def test_torn_tail_is_truncated_and_earlier_batches_survive(
    load: OpenPartition, pdir: Path, cut: int
) -> None:
    await append_all(load, 4)
    (path,) = wal_files(pdir)
    batches = [make_batch(i * 3) for i in range(4)]
    last = frame_position(batches, 3)
    size = path.stat().st_size
    # Cut the last frame short: `cut` bytes of it remain (-1: all but its final byte).
    keep = size - 1 if cut == -1 else last + cut
    with path.open("r+b") as f:
        f.truncate(keep)
    partition = await load()
    assert path.stat().st_size == last
    assert partition.offsets().next_offset == 9
    result = await partition.read(0, 0, BIG)
    assert offsets_of(result.batches) == [0, 3, 6]
    for batch in result.batches:
        check_batch(batch)
    # The log continues where the torn frame was.
    await partition.open(2)
    assert await partition.append(2, [make_batch(9)]) == 12


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x07" * 10,  # shorter than a header
        b"\xff" * 100,  # a header whose length runs past the end
        # a complete frame whose checksum is wrong, at the very end
        encode_header(base_offset=12, count=1, publish_time_us=0, epoch=1, body=b"abc")[:-1]
        + b"\x00"
        + b"abd",
    ],
    ids=["short-header", "length-past-end", "bad-checksum"],
)
async def test_garbage_after_the_last_frame_is_truncated(
    load: OpenPartition, pdir: Path, garbage: bytes
) -> None:
    await append_all(load, 4)
    (path,) = wal_files(pdir)
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(garbage)
    partition = await load()
    assert path.stat().st_size == size
    assert partition.offsets().next_offset == 12
    assert len((await partition.read(0, 0, BIG)).batches) == 4


async def test_flipped_byte_in_a_middle_frame_is_corruption(
    load: OpenPartition, pdir: Path
) -> None:
    await append_all(load, 5)
    (path,) = wal_files(pdir)
    batches = [make_batch(i * 3) for i in range(5)]
    corrupt_at = frame_position(batches, 2)
    flip_byte(path, corrupt_at + HEADER_SIZE + 20)
    size = path.stat().st_size
    partition = await load()
    assert path.stat().st_size == size  # corruption is never truncated away
    # Offsets before the corrupt frame are still served, and a read stops short of it.
    result = await partition.read(0, 0, BIG)
    assert offsets_of(result.batches) == [0, 3]
    assert (await partition.read(4, 0, BIG)).batches[0].base_offset == 3
    for start in (6, 7, 12):
        with pytest.raises(DataLoss, match=rf"{path.name}.* at byte {corrupt_at}"):
            await partition.read(start, 0, BIG)
    with pytest.raises(DataLoss, match="offsets 6-"):
        await partition.append(1, [make_batch(15)])
    # A new owner can claim it (the intact offsets stay readable), not append.
    # Its end is where the frames past the damage end: reads reach the damage.
    assert (await partition.open(2)).next_offset == 15
    with pytest.raises(DataLoss, match="offsets 6-"):
        await partition.append(2, [make_batch(6)])


async def test_inconsistent_offsets_are_corruption(load: OpenPartition, pdir: Path) -> None:
    wal_dir = pdir / "_wal"
    wal_dir.mkdir(parents=True)
    frames = b""
    for base, count in ((0, 3), (5, 3), (8, 3)):  # a gap: 3 and 4 are missing
        body = make_batch(base, count).arrow_ipc
        header = encode_header(base_offset=base, count=count, publish_time_us=1, epoch=1, body=body)
        frames += header + body
    (wal_dir / wal_file_name(0)).write_bytes(frames)
    partition = await load()
    assert offsets_of((await partition.read(0, 0, BIG)).batches) == [0]
    with pytest.raises(DataLoss, match="frame holds offset 5, expected 3"):
        await partition.read(3, 0, BIG)


async def three_batches(
    load: OpenPartition, pdir: Path
) -> tuple[Partition, Path, list[StoredBatch]]:
    """An open partition holding three 3-message batches in one WAL file."""
    partition = await load()
    await partition.open(1)
    batches = [make_batch(i * 3) for i in range(3)]
    for batch in batches:
        await partition.append(1, [batch])
    (path,) = wal_files(pdir)
    return partition, path, batches


async def test_reads_reverify_checksums(load: OpenPartition, pdir: Path) -> None:
    partition, path, batches = await three_batches(load, pdir)
    flip_byte(path, frame_position(batches, 1) + HEADER_SIZE + 3)  # bit rot while open
    assert offsets_of((await partition.read(0, 0, BIG)).batches) == [0]
    with pytest.raises(DataLoss, match="checksum"):
        await partition.read(3, 0, BIG)
    with pytest.raises(DataLoss):
        await partition.append(1, [make_batch(9)])


async def test_reads_catch_a_file_cut_short_while_open(load: OpenPartition, pdir: Path) -> None:
    partition, path, batches = await three_batches(load, pdir)
    with path.open("r+b") as f:
        f.truncate(frame_position(batches, 2) + HEADER_SIZE + 5)  # into the last body
    result = await partition.read(0, 0, BIG)
    assert offsets_of(result.batches) == [0, 3]
    for batch in result.batches:
        check_batch(batch)
    with pytest.raises(DataLoss, match="shorter than indexed"):
        await partition.read(6, 0, BIG)


async def test_reads_catch_a_file_emptied_while_open(load: OpenPartition, pdir: Path) -> None:
    """An empty file cannot be mapped: a read reports the frames missing, as a short one."""
    partition, path, _ = await three_batches(load, pdir)
    with path.open("r+b") as f:
        f.truncate(0)
    with pytest.raises(DataLoss, match="shorter than indexed"):
        await partition.read(0, 0, BIG)


async def test_rolls_files_and_reads_across_them(load: OpenPartition, pdir: Path) -> None:
    frame = len(make_batch(0, 2).arrow_ipc) + HEADER_SIZE
    partition = await load(WalOptions(file_bytes=frame * 3))  # three frames per file
    await partition.open(1)
    for i in range(8):
        await partition.append(1, [make_batch(i * 2, 2)])
    assert [p.name for p in wal_files(pdir)] == [wal_file_name(o) for o in (0, 6, 12)]
    await partition.close()

    partition = await load(WalOptions(file_bytes=frame * 3))
    result = await partition.read(5, 0, BIG)  # starts inside the batch at 4
    assert offsets_of(result.batches) == [4, 6, 8, 10, 12, 14]
    for batch in result.batches:
        check_batch(batch)
    result = await partition.read(7, 3, BIG)  # 1 message of batch 6, then batch 8 ends it
    assert offsets_of(result.batches) == [6, 8]
    assert result.next_offset == 10
    await partition.append(1, [make_batch(16, 2)])
    assert wal_files(pdir)[-1].name == wal_file_name(12)  # a file with room keeps filling


async def test_read_limits(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    for i in range(4):
        await partition.append(1, [make_batch(i * 10, 10, pad=500)])
    size = len(make_batch(10, 10, pad=500).arrow_ipc)  # batches 10 and 20 are as large
    assert offsets_of((await partition.read(0, 0, 1)).batches) == [0]  # one, however large
    assert offsets_of((await partition.read(15, 0, 2 * size)).batches) == [10, 20]
    assert offsets_of((await partition.read(0, 11, BIG)).batches) == [0, 10]
    assert offsets_of((await partition.read(39, 1, BIG)).batches) == [30]
    end = await partition.read(40, 0, BIG)
    assert end.batches == ()
    assert end.next_offset == 40


async def test_read_outside_the_log_is_refused(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    await partition.append(1, [make_batch(0)])
    with pytest.raises(InvalidArgument, match="offset 4 is beyond the partition's end 3"):
        await partition.read(4, 0, BIG)
    with pytest.raises(InvalidArgument, match="offset -1 is below the partition's start offset 0"):
        await partition.read(-1, 0, BIG)


async def test_a_damaged_length_field_is_corruption_not_a_torn_tail(
    load: OpenPartition, pdir: Path
) -> None:
    await append_all(load, 5)
    (path,) = wal_files(pdir)
    batches = [make_batch(i * 3) for i in range(5)]
    damaged = frame_position(batches, 2)
    # A huge length makes the frame look cut short by a crash; the frames after it
    # are intact and acknowledged, so recovery must refuse rather than truncate.
    flip_byte(path, damaged + 3)
    size = path.stat().st_size
    partition = await load()
    assert path.stat().st_size == size, "acknowledged frames after the damage are kept"
    with pytest.raises(DataLoss, match="valid frame follows"):
        await partition.read(6, 0, BIG)
    assert offsets_of((await partition.read(0, 0, BIG)).batches) == [0, 3]
