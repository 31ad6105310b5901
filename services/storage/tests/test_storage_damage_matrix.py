"""`tamto storage verify` and `repair` against every kind of damage to every file kind.

A data directory is built once: ``orders/0`` with three sealed segments (0-2,
3-5, 6-8), their WAL files still there as a read tail (0.log: 0-5, 6.log:
6-8), six unsealed batches in three WAL files of two frames each (9.log: 9-14,
15.log: 15-20, 21.log: 21-26), a committed cursor and the epoch; ``orders/1``
with two sealed segments (0-5) and an empty WAL; two manifest versions. Each
case copies it, damages one file (missing, truncated, garbled) and checks:

1. `verify` reports exactly the damage kinds expected (none where storage
   cannot tell the damage from a normal state: docs/recovery.md, "Damaged and
   missing files", says which);
2. `repair` records exactly the offsets no intact file holds as lost;
3. `verify` is clean afterwards, and a second repair changes no byte;
4. storage serves every offset that was not lost, with its payload, the log's
   end never moves back (but where the case says the damage is silent), and
   the partition accepts a publish at its end.

Every case runs in CI (about a tenth of a second each). A randomized test then
damages a WAL file before the last at random (garbled bytes, a cut, the whole
file) and checks that exactly the frames it touched are lost: 20 cases in CI,
500 with TAMTO_LONG_TESTS=1 (docs/testing.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import shutil
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from storage_testkit import check_batch, make_batch, read_all

from tamto_common.errors import DataLoss, damaged_offsets
from tamto_protocol.segment import MANIFEST_DIR, manifest_versions, segment_file_name
from tamto_storage.frame import HEADER_SIZE
from tamto_storage.model import Cursor, OffsetRange, PartitionId
from tamto_storage.scrub import Repaired, repair, verify
from tamto_storage.sealer import SealOptions
from tamto_storage.store import PartitionStore, partition_dir
from tamto_storage.wal import WalOptions
from tamto_storage.wal_recovery import wal_file_name
from tamto_testing.waiting import long_tests_enabled

STREAM = "orders"
EPOCH = 3
#: Every batch holds 3 messages; its frame is this long (asserted when building).
FRAME = HEADER_SIZE + len(make_batch(0).arrow_ipc)
ENDS = {0: 27, 1: 6}


@dataclass(frozen=True)
class Case:
    """A damage, what verify must find, and what is lost afterwards."""

    damage: Callable[[Path], None]
    kinds: frozenset[str] = frozenset()
    #: Offsets repair must record as lost, by partition.
    lost: dict[int, Collection[int]] = field(default_factory=dict)
    #: Offsets gone without a trace storage could see (the log's end moves back to their start).
    silent: dict[int, range] = field(default_factory=dict)


def pdir(data: Path, number: int = 0) -> Path:
    return partition_dir(data, PartitionId(STREAM, number))


def wal(data: Path, first: int) -> Path:
    return pdir(data) / "_wal" / wal_file_name(first)


def segment(data: Path, first: int) -> Path:
    return pdir(data) / segment_file_name(first, first + 2)


def remove(path: Callable[[Path], Path]) -> Callable[[Path], None]:
    def damage(data: Path) -> None:
        target = path(data)
        shutil.rmtree(target) if target.is_dir() else target.unlink()

    return damage


def cut(path: Callable[[Path], Path], size: Callable[[int], int]) -> Callable[[Path], None]:
    """Truncate the file to `size(its size)` bytes."""

    def damage(data: Path) -> None:
        target = path(data)
        with target.open("r+b") as f:
            f.truncate(size(target.stat().st_size))

    return damage


def garble(path: Callable[[Path], Path], at: Callable[[int], int]) -> Callable[[Path], None]:
    """Invert 4 bytes from `at(its size)`."""

    def damage(data: Path) -> None:
        target = path(data)
        content = bytearray(target.read_bytes())
        start = at(len(content))
        for i in range(start, min(start + 4, len(content))):
            content[i] ^= 0xFF
        target.write_bytes(bytes(content))

    return damage


def without_tail(damage: Callable[[Path], None]) -> Callable[[Path], None]:
    """`damage`, once the sealed WAL files (the read tail) are gone, as storage removes them
    at load: no intact copy of the sealed offsets is left."""

    def both(data: Path) -> None:
        for first in (0, 6):
            wal(data, first).unlink()
        damage(data)

    return both


def newest_manifest(data: Path) -> Path:
    return manifest_versions(data / "streams" / STREAM)[-1][1]


def cursor(data: Path) -> Path:
    return pdir(data) / "_cursors" / "audit.json"


def epoch(data: Path) -> Path:
    return pdir(data) / "_epoch"


def half(size: int) -> int:
    return size // 2


def body_of(frame: int) -> Callable[[int], int]:
    """The middle of the body of the `frame`-th frame (from 0) of a WAL file."""
    return lambda _: frame * FRAME + HEADER_SIZE + (FRAME - HEADER_SIZE) // 2


CASES = {
    # WAL files (0.log and 6.log only hold sealed offsets: the read tail).
    "wal-read-tail-missing": Case(remove(lambda d: wal(d, 0))),
    "wal-first-unsealed-missing": Case(
        remove(lambda d: wal(d, 9)), frozenset({"wal"}), {0: range(9, 15)}
    ),
    "wal-middle-missing": Case(
        remove(lambda d: wal(d, 15)), frozenset({"wal"}), {0: range(15, 21)}
    ),
    "wal-last-missing": Case(remove(lambda d: wal(d, 21)), silent={0: range(21, 27)}),
    "wal-middle-truncated-mid-frame": Case(
        cut(lambda d: wal(d, 15), lambda _: FRAME + FRAME // 2),
        frozenset({"wal"}),
        {0: range(18, 21)},
    ),
    "wal-middle-truncated-at-a-frame": Case(
        cut(lambda d: wal(d, 15), lambda _: FRAME), frozenset({"wal"}), {0: range(18, 21)}
    ),
    "wal-last-truncated-mid-frame": Case(  # a torn write, as a crash leaves
        cut(lambda d: wal(d, 21), lambda _: FRAME + 100), silent={0: range(24, 27)}
    ),
    "wal-garbled-body": Case(
        garble(lambda d: wal(d, 15), body_of(0)), frozenset({"wal"}), {0: range(15, 18)}
    ),
    "wal-garbled-length": Case(
        garble(lambda d: wal(d, 15), lambda _: FRAME), frozenset({"wal"}), {0: range(18, 21)}
    ),
    "wal-garbled-offset-of-first-unsealed": Case(
        garble(lambda d: wal(d, 9), lambda _: 8), frozenset({"wal"}), {0: range(9, 12)}
    ),
    "wal-garbled-in-last-file": Case(
        garble(lambda d: wal(d, 21), body_of(0)), frozenset({"wal"}), {0: range(21, 24)}
    ),
    "wal-garbled-last-frame": Case(  # a torn write too, for all storage can tell
        garble(lambda d: wal(d, 21), body_of(1)), silent={0: range(24, 27)}
    ),
    "wal-directory-missing": Case(
        remove(lambda d: pdir(d) / "_wal"), frozenset({"wal"}), silent={0: range(9, 27)}
    ),
    # Segments: with the read tail there, repair seals the range again from it.
    "segment-missing-with-tail": Case(remove(lambda d: segment(d, 3)), frozenset({"segment"})),
    "segment-garbled-with-tail": Case(
        garble(lambda d: segment(d, 3), half), frozenset({"segment"})
    ),
    "segment-first-missing": Case(
        without_tail(remove(lambda d: segment(d, 0))), frozenset({"segment"}), {0: range(0, 3)}
    ),
    "segment-middle-missing": Case(
        without_tail(remove(lambda d: segment(d, 3))), frozenset({"segment"}), {0: range(3, 6)}
    ),
    "segment-last-missing": Case(
        without_tail(remove(lambda d: segment(d, 6))), frozenset({"segment"}), {0: range(6, 9)}
    ),
    "segment-truncated": Case(
        without_tail(cut(lambda d: segment(d, 3), half)), frozenset({"segment"}), {0: range(3, 6)}
    ),
    "segment-garbled-mid-file": Case(
        without_tail(garble(lambda d: segment(d, 3), half)),
        frozenset({"segment"}),
        {0: range(3, 6)},
    ),
    # A segment's index is its Parquet footer (storage keeps no index file of its own).
    "segment-footer-index-garbled": Case(
        without_tail(garble(lambda d: segment(d, 3), lambda size: size - 40)),
        frozenset({"segment"}),
        {0: range(3, 6)},
    ),
    # The manifest: storage finds the segments on disk without it.
    "manifest-missing": Case(remove(lambda d: d / "streams" / STREAM / MANIFEST_DIR)),
    "manifest-truncated": Case(cut(newest_manifest, half), frozenset({"manifest"})),
    "manifest-garbled": Case(garble(newest_manifest, half), frozenset({"manifest"})),
    # Cursors and the epoch hold no messages: nothing is lost.
    "cursor-missing": Case(remove(cursor)),
    "cursor-truncated": Case(cut(cursor, half), frozenset({"cursor"})),
    "cursor-garbled": Case(garble(cursor, half), frozenset({"cursor"})),
    "epoch-missing": Case(remove(epoch)),
    "epoch-truncated": Case(cut(epoch, half), frozenset({"epoch"})),
    "epoch-garbled": Case(garble(epoch, lambda _: 0), frozenset({"epoch"})),
    # A whole partition: what the manifest records of it is lost, recorded as such.
    "partition-directory-missing": Case(
        remove(lambda d: pdir(d, 1)), frozenset({"partition"}), {1: range(0, 6)}
    ),
    "partition-directory-missing-with-unsealed": Case(
        remove(lambda d: pdir(d, 0)),
        frozenset({"partition"}),
        {0: range(0, 9)},
        silent={0: range(9, 27)},
    ),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data directory every case starts from (built once; see the module docstring)."""
    data = tmp_path_factory.mktemp("pristine") / "data"

    async def build() -> None:
        store = PartitionStore(
            data,
            WalOptions(file_bytes=2 * FRAME + FRAME // 2),
            seal_options=SealOptions(segment_bytes=1, wal_tail_bytes=1 << 20),
        )
        p0, p1 = await store.get(STREAM, 0), await store.get(STREAM, 1)
        for partition in (p0, p1):
            await partition.open(EPOCH)
        for base in (0, 3, 6):
            await p0.append(EPOCH, [make_batch(base)])
        for base in (0, 3):
            await p1.append(EPOCH, [make_batch(base)])
        assert store.sealer is not None
        await store.sealer.seal_all()
        for base in range(9, 27, 3):
            await p0.append(EPOCH, [make_batch(base)])
        await p0.commit_cursor(EPOCH, "audit", Cursor(4, (OffsetRange(10, 11),)))
        for partition in (p0, p1):
            await partition.close()  # not store.close(): that would seal the WAL too

    asyncio.run(build())
    wal_sizes = {p.name: p.stat().st_size for p in (pdir(data) / "_wal").iterdir()}
    assert wal_sizes == {
        wal_file_name(0): 2 * FRAME,
        wal_file_name(6): FRAME,
        wal_file_name(9): 2 * FRAME,
        wal_file_name(15): 2 * FRAME,
        wal_file_name(21): 2 * FRAME,
    }
    return data


def lost_offsets(repaired: list[Repaired]) -> dict[int, set[int]]:
    lost: dict[int, set[int]] = {}
    for done in repaired:
        for span in filter(None, done.lost.split(",")):
            assert done.finding.partition is not None
            first, last = (int(x) for x in span.split("-"))
            lost.setdefault(done.finding.partition, set()).update(range(first, last + 1))
    return lost


def snapshot(data: Path) -> dict[str, str]:
    """Every file under `data` by path, with a digest of its bytes."""
    return {
        str(p.relative_to(data)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(data.rglob("*"))
        if p.is_file()
    }


async def check_served(data: Path, case: Case) -> None:
    """Every offset neither lost nor silently gone reads with its payload; publishing goes on."""
    store = PartitionStore(data, WalOptions())
    try:
        for number, end in ENDS.items():
            partition = await store.get(STREAM, number)
            assert partition.damage() == []
            gone = {*case.lost.get(number, ()), *case.silent.get(number, ())}
            offsets = partition.offsets()
            assert offsets.next_offset == (
                case.silent[number].start if number in case.silent else end
            )
            read: list[int] = []
            for batch in await read_all(partition, offsets.start_offset):
                check_batch(batch)
                read += range(batch.base_offset, batch.end_offset)
            assert read == [o for o in range(offsets.next_offset) if o not in gone]
            await partition.open(EPOCH + 1)
            next_offset = offsets.next_offset
            assert await partition.append(EPOCH + 1, [make_batch(next_offset)]) == next_offset + 3
            (batch,) = (await partition.read(next_offset, 0, 1 << 20)).batches
            check_batch(batch)
    finally:
        await store.close()


@pytest.mark.parametrize("name", CASES)
async def test_verify_and_repair_leave_every_intact_offset_readable(
    pristine: Path, tmp_path: Path, name: str
) -> None:
    case = CASES[name]
    data = tmp_path / "data"
    shutil.copytree(pristine, data)
    case.damage(data)

    findings = verify(data)
    assert {f.kind for f in findings} == case.kinds, [f.describe() for f in findings]
    repaired: list[Repaired] = []
    repair(data, findings, repaired.append)
    assert lost_offsets(repaired) == {p: set(r) for p, r in case.lost.items()}
    assert verify(data) == []
    before = snapshot(data)
    assert repair(data, verify(data), repaired.append) == []
    assert snapshot(data) == before
    await check_served(data, case)


async def test_a_wal_behind_its_segments_starts_again_after_them(
    pristine: Path, tmp_path: Path
) -> None:
    """Started before any repair with its WAL directory gone, storage neither hands out
    the sealed offsets again nor hides them: the WAL starts after the segments."""
    data = tmp_path / "data"
    shutil.copytree(pristine, data)
    shutil.rmtree(pdir(data) / "_wal")
    store = PartitionStore(data, WalOptions())
    try:
        partition = await store.get(STREAM, 0)
        offsets = partition.offsets()
        assert (offsets.start_offset, offsets.next_offset) == (0, 9)
        batches = await read_all(partition, 0)
        assert [b.base_offset for b in batches] == [0, 3, 6]
        for batch in batches:
            check_batch(batch)
        await partition.open(EPOCH + 1)
        assert await partition.append(EPOCH + 1, [make_batch(9)]) == 12
    finally:
        await store.close()
    assert verify(data) == []


@pytest.mark.parametrize(
    ("name", "number", "missing"),
    [
        ("segment-first-missing", 0, [(0, 2)]),
        ("segment-middle-missing", 0, [(3, 5)]),
        ("segment-last-missing", 0, [(6, 8)]),
        ("partition-directory-missing", 1, [(0, 2), (3, 5)]),
    ],
)
async def test_a_missing_segment_is_data_loss_for_its_offsets_only(
    pristine: Path, tmp_path: Path, name: str, number: int, missing: list[tuple[int, int]]
) -> None:
    """Started before any repair, storage keeps a segment the manifest records but whose
    file is gone in its place: DATA_LOSS for its offsets, every other offset served,
    publishes go on, and `verify` still finds the loss after the node ran."""
    data = tmp_path / "data"
    shutil.copytree(pristine, data)
    CASES[name].damage(data)
    store = PartitionStore(data, WalOptions())
    try:
        partition = await store.get(STREAM, number)
        end = partition.offsets().next_offset
        assert (partition.offsets().start_offset, end) == (0, ENDS[number])
        for offset in range(0, end, 3):
            lost = [(a, b) for a, b in missing if a <= offset <= b]
            if lost:
                with pytest.raises(DataLoss) as info:
                    await partition.read(offset, 0, 1 << 20)
                assert damaged_offsets(str(info.value)) == lost[0]
                assert segment_file_name(*lost[0]) in str(info.value)
                continue
            batch = (await partition.read(offset, 3, 1 << 20)).batches[0]
            assert batch.base_offset == offset
            check_batch(batch)
        await partition.open(EPOCH + 1)
        assert await partition.append(EPOCH + 1, [make_batch(end)]) == end + 3
    finally:
        await store.close()
    found = [(f.kind, f.first_offset, f.last_offset) for f in verify(data)]
    assert found == [("segment", missing[0][0], missing[-1][1])]


#: Random damages of the WAL the next test checks: a few in CI, many in the long form.
GARBLINGS = 500 if long_tests_enabled() else 20


async def test_random_wal_damage_loses_exactly_the_frames_it_touched(
    pristine: Path, tmp_path: Path
) -> None:
    """Random runs of garbled bytes, a random cut or a whole file gone, in the WAL files
    before the last (the last file's final frame reads as a torn write): repair loses
    exactly the frames the damage touched, keeps every other, and the partition ends
    where it did."""
    rng = random.Random(31)
    for n in range(GARBLINGS):
        data = tmp_path / f"case{n}"
        shutil.copytree(pristine, data)
        first = rng.choice((9, 15))
        target = wal(data, first)
        content = bytearray(target.read_bytes())
        start = rng.randrange(2 * FRAME)
        kind = rng.random()
        if kind < 0.2:  # the whole file
            start, end = 0, 2 * FRAME
            content.clear()
        elif kind < 0.4:  # cut
            end = 2 * FRAME
            del content[start:]
        else:
            end = start + rng.randint(1, 2 * FRAME - start)
            for i in range(start, end):
                content[i] ^= rng.randint(1, 255)
        target.write_bytes(bytes(content))
        if not content:
            target.unlink()
        touched = {
            offset
            for frame in range(2)
            if start < (frame + 1) * FRAME and frame * FRAME < end
            for offset in range(first + 3 * frame, first + 3 * frame + 3)
        }
        context = f"case {n}: {target.name} bytes {start}-{end - 1} of {len(content)} left"

        findings = verify(data)
        assert [f.kind for f in findings] == ["wal"], context
        repaired: list[Repaired] = []
        repair(data, findings, repaired.append)
        assert lost_offsets(repaired) == {0: touched}, context
        assert verify(data) == [], context
        await check_served(data, Case(lambda _: None, lost={0: touched}))
        shutil.rmtree(data)
