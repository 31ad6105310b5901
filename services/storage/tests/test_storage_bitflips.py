"""One flipped bit in every kind of file storage keeps: found, isolated, repaired.

A small partition is built once (two sealed segments, unsealed WAL frames, a
committed cursor, the epoch, manifest versions). Each case copies it, flips one
bit of one file, and checks the whole path an operator would see:

1. storage finds it: a read of the damaged offsets raises DATA_LOSS naming the
   file and the offsets, the offsets outside stay readable (segments, WAL), or
   the file is refused with a message naming it (cursor, epoch), or storage
   goes on from the previous version (manifest);
2. `verify` reports the file;
3. `repair` deals with it, recording what was lost, and `verify` is clean;
4. the repaired partition serves every offset outside the loss and accepts
   publishes again.

CI flips 2 random bits per kind; TAMTO_LONG_TESTS=1 flips 200 per kind
(docs/testing.md).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from storage_testkit import check_batch, make_batch

from tamto_common.errors import DataLoss, damaged_offsets
from tamto_protocol.segment import manifest_versions, segment_file_name
from tamto_storage.model import Cursor, OffsetRange, PartitionId, StoredBatch
from tamto_storage.scrub import Finding, Repaired, repair, verify
from tamto_storage.sealer import SealOptions
from tamto_storage.store import PartitionStore, partition_dir
from tamto_storage.wal import WalOptions
from tamto_storage.wal_recovery import recover
from tamto_testing.waiting import long_tests_enabled

STREAM = "orders"
PID = PartitionId(STREAM, 0)
BIG = 1 << 20
SEALED = 6  # offsets 0-5 sealed in two segments, 6-14 only in the WAL
END = 15
FLIPS = 200 if long_tests_enabled() else 2
KINDS = ("segment", "wal", "manifest", "cursor", "epoch")


def store_for(data: Path) -> PartitionStore:
    return PartitionStore(data, WalOptions(), seal_options=SealOptions(segment_bytes=1))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data directory every case starts from (built once)."""
    import asyncio

    data = tmp_path_factory.mktemp("pristine") / "data"

    async def build() -> None:
        store = store_for(data)
        partition = await store.get(STREAM, 0)
        await partition.open(1)
        for base in (0, 3):
            await partition.append(1, [make_batch(base)])
        assert store.sealer is not None
        await store.sealer.seal_all()
        for base in (6, 9, 12):
            await partition.append(1, [make_batch(base)])
        await partition.commit_cursor(1, "audit", Cursor(4, (OffsetRange(7, 8),)))
        await partition.close()  # not store.close(): that would seal the WAL too

    asyncio.run(build())
    return data


def target(data: Path, kind: str) -> tuple[Path, int, int]:
    """(file, first byte, end byte) of where a flip of `kind` goes."""
    pdir = partition_dir(data, PID)
    if kind == "segment":
        path = pdir / segment_file_name(3, 5)
        return path, 0, path.stat().st_size
    if kind == "wal":
        # The unsealed frames but the last: a CRC failure on the very last frame of
        # the log is what a crash mid-write leaves, and is truncated as a torn tail.
        entries = [e for e in recover(pdir / "_wal", truncate=False).entries if e.base_offset >= 6]
        first, last = entries[0], entries[-2]
        return first.file, first.position, last.position + last.frame_length
    if kind == "manifest":
        path = manifest_versions(data / "streams" / STREAM)[-1][1]
    elif kind == "cursor":
        path = pdir / "_cursors" / "audit.json"
    else:
        path = pdir / "_epoch"
    return path, 0, path.stat().st_size


def flip_bit(path: Path, start: int, end: int, rng: random.Random) -> int:
    position = rng.randrange(start, end)
    with path.open("r+b") as f:
        f.seek(position)
        value = f.read(1)[0]
        f.seek(position)
        f.write(bytes([value ^ (1 << rng.randrange(8))]))
    return position


async def read_from(store: PartitionStore, offset: int) -> list[StoredBatch]:
    partition = await store.get(STREAM, 0)
    return list((await partition.read(offset, 0, BIG)).batches)


async def read_or_error(store: PartitionStore, offset: int) -> list[StoredBatch] | DataLoss:
    try:
        return await read_from(store, offset)
    except DataLoss as exc:
        return exc


async def check_found(data: Path, kind: str, path: Path) -> None:
    """What storage does with the damaged file, before any repair."""
    store = PartitionStore(data, WalOptions())  # no sealer: stopping it changes nothing
    try:
        if kind == "epoch":
            with pytest.raises(DataLoss, match=str(path)):
                await store.get(STREAM, 0)
            return
        partition = await store.get(STREAM, 0)
        if kind == "cursor":
            with pytest.raises(DataLoss, match=str(path)):
                await partition.get_cursor("audit")
        if kind in ("manifest", "cursor"):  # no message is affected
            for offset in range(0, END, 3):
                check_batch((await read_from(store, offset))[0])
            return
        damaged = (3, 5) if kind == "segment" else None
        for offset in range(0, END, 3):
            result = await read_or_error(store, offset)
            if isinstance(result, DataLoss):
                assert str(path) in str(result)
                found = damaged_offsets(str(result))
                assert found is not None
                if kind == "segment":
                    assert found == damaged
                else:  # the WAL is unreadable from the damaged frame on
                    assert found[0] >= SEALED
                    assert found[1] is None
                    damaged = damaged or (found[0], END - 1)
                assert damaged[0] <= offset <= damaged[1]
                continue
            assert damaged is None or not damaged[0] <= offset <= damaged[1], offset
            check_batch(result[0])
        assert damaged is not None, "the damage was served as if whole"
        assert any(str(path) in line for line in partition.damage())
    finally:
        await store.close()


async def check_repaired(data: Path, repaired: list[Repaired]) -> None:
    """After repair: every offset outside the loss reads, and publishing goes on."""
    lost: set[int] = set()
    for done in repaired:
        if done.lost:
            first, last = (int(x) for x in done.lost.split("-"))
            lost |= set(range(first, last + 1))
    store = PartitionStore(data, WalOptions())
    try:
        partition = await store.get(STREAM, 0)
        seen: list[int] = []
        offset = partition.offsets().start_offset
        while offset < partition.offsets().next_offset:
            result = await partition.read(offset, 0, BIG)
            for batch in result.batches:
                check_batch(batch)
                seen += range(batch.base_offset, batch.end_offset)
            offset = result.next_offset
        expected = [o for o in range(partition.offsets().next_offset) if o not in lost]
        assert sorted(set(seen)) == expected
        end = partition.offsets().next_offset
        await partition.open(2)
        assert await partition.append(2, [make_batch(end)]) == end + 3
    finally:
        await store.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_one_flipped_bit_is_found_isolated_and_repaired(
    pristine: Path, tmp_path: Path, kind: str
) -> None:
    rng = random.Random(f"{kind}-17")
    for flip in range(FLIPS):
        data = tmp_path / f"flip{flip}"
        shutil.copytree(pristine, data)
        path, start, end = target(data, kind)
        position = flip_bit(path, start, end, rng)
        context = f"{kind} {path.name} byte {position}"

        await check_found(data, kind, path)
        findings = verify(data)
        assert [(f.kind, f.file) for f in findings if f.file == path] == [(kind, path)], context
        repaired: list[Repaired] = []
        repair(data, findings, repaired.append)
        assert [r.finding for r in repaired] == findings
        assert verify(data) == [], context
        await check_repaired(data, repaired)
        shutil.rmtree(data)


def test_findings_name_the_offsets_a_damaged_file_covers() -> None:
    finding = Finding("segment", STREAM, 0, Path("/d/seg"), "bad", 3, 5)
    assert finding.describe() == "segment orders/0 offsets 3-5: /d/seg: bad"
    assert Finding("wal", STREAM, 0, Path("/w"), "crc", 6).offsets() == "6-"
