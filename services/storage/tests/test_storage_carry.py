"""Interest retention on real files: acked segments go, a few needed messages are carried
forward, reads by offset and the manifest stay right, and a plain listing never sees a
message twice."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tamto_common.errors import InvalidArgument
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.segment import Manifest, read_manifest
from tamto_spark.segments import Range, plan_slices, read_slice
from tamto_storage.interest import ReclaimLimits
from tamto_storage.model import Cursor, OffsetRange, StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.reclaim import Reclaimer
from tamto_storage.sealer import Retention, Sealer, SealOptions
from tamto_storage.segment_reads import to_stored_batches
from tamto_storage.segments import build_table
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions

T_US = 1_800_000_000_000_000
GRACE_S = 60.0
BATCH = 100
BATCHES = 20  # offsets 0..1999, one segment per batch (segment_bytes=1)
STREAM = "orders"


class Clock:
    def __init__(self) -> None:
        self.now = T_US / 1e6

    def __call__(self) -> float:
        return self.now


def batch(base: int, count: int = BATCH) -> StoredBatch:
    """Messages with every column set, so a carried-forward copy can be compared exactly."""
    offsets = range(base, base + count)
    arrow = encode_batch(
        BatchColumns(
            payloads=[f"m{o}".encode() + b"." * 200 for o in offsets],
            keys=[f"k{o % 7}".encode() for o in offsets],
            headers=[{"trace": f"t{o}"} for o in offsets],
            ids=[f"id-{o}" for o in offsets],
            event_times_us=[T_US - o for o in offsets],
            producer="p1",
        )
    )
    return StoredBatch(base, count, T_US + base, arrow)


class Setup:
    def __init__(self, tmp_path: Path, *, interest: bool = True, retention_ms: int = 0) -> None:
        self.data = tmp_path / "data"
        self.clock = Clock()
        policy = Retention(retention_ms, 0, interest=interest)

        async def retention(stream: str) -> Retention:
            return policy

        self.store = PartitionStore(
            self.data,
            WalOptions(file_bytes=8_000),
            seal_options=SealOptions(segment_bytes=1, retention_grace_s=GRACE_S),
            retention_for=retention,
            clock=self.clock,
        )

    @property
    def sealer(self) -> Sealer:
        assert self.store.sealer is not None
        return self.store.sealer

    @property
    def stream_dir(self) -> Path:
        return self.data / "streams" / STREAM

    def manifest(self) -> Manifest:
        return read_manifest(self.stream_dir)

    async def filled(self) -> Partition:
        partition = await self.store.get(STREAM, 0)
        await partition.open(1)
        for base in range(0, BATCH * BATCHES, BATCH):
            await partition.append(1, [batch(base)])
        await self.sealer.seal_all()
        return partition

    def disk_bytes(self) -> int:
        pdir = self.stream_dir / "partition=0"
        return sum(p.stat().st_size for p in pdir.rglob("*") if p.is_file())

    async def later(self, seconds: float) -> None:
        self.clock.now += seconds
        await self.sealer.run_once()


def acked_all_but(*unacked: int, end: int = BATCH * BATCHES) -> Cursor:
    """A cursor that acked offsets 0..end-1 except `unacked`."""
    first = min(unacked)
    edges = [*sorted(unacked), end]
    ranges = [OffsetRange(a + 1, b - 1) for a, b in itertools.pairwise(edges)]
    return Cursor(first, tuple(r for r in ranges if r.first <= r.last))


def plain_listing(stream_dir: Path) -> list[int]:
    """Offsets a file listing sees, as `spark.read.parquet(stream_dir)` would ('_'/'.' skipped)."""
    table = ds.dataset(stream_dir, format="parquet", partitioning="hive").to_table()
    return sorted(table.column("offset").to_pylist())


def manifest_read(stream_dir: Path, manifest: Manifest) -> list[int]:
    """Offsets the `tamto` Spark source reads when it plans from `manifest`."""
    offsets: list[int] = []
    for part in plan_slices(stream_dir, manifest, Range({}, {})):
        for record_batch in read_slice(part):
            offsets += record_batch.column("offset").to_pylist()
    return sorted(offsets)


async def read_everything(partition: Partition, start: int) -> list[StoredBatch]:
    out: list[StoredBatch] = []
    offset = start
    while offset < partition.offsets().next_offset:
        result = await partition.read(offset, 0, 1 << 30)
        assert result.batches, f"empty read at {offset}, below the end"
        out += result.batches
        offset = result.next_offset
    return out


def offsets_in(batches: Sequence[StoredBatch]) -> list[int]:
    return [o for b in batches for o in range(b.base_offset, b.end_offset)]


async def test_one_unacked_message_among_acked_ones_retains_only_itself(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        partition = await setup.filled()
        await partition.commit_cursor(1, "billing", acked_all_but(1234))
        await partition.commit_cursor(1, "audit", Cursor(2000))
        before_manifest = setup.manifest()
        before_bytes = setup.disk_bytes()
        assert len(before_manifest.segments) == BATCHES

        await setup.later(1)
        # 0-1199 are whole segments nobody needs: dropped, the start moves past them.
        assert partition.offsets().start_offset == 1200
        assert partition.offsets().next_offset == 2000
        # 1200-1999 are one small segment now, covering the whole range.
        [carried] = partition.segment_log.segments
        assert (carried.first_offset, carried.last_offset) == (1200, 1999)
        assert carried.entry.staged
        assert carried.entry.rows == 2, "the unacked one, and the newest (kept for reads)"

        # Reads by offset: from anywhere they find the next stored message.
        assert offsets_in(await read_everything(partition, 1200)) == [1234, 1999]
        assert offsets_in((await partition.read(1235, 0, 1 << 20)).batches) == [1999]
        with pytest.raises(InvalidArgument, match="below the partition's start offset 1200"):
            await partition.read(1000, 0, 1 << 20)

        # The carried copy is the original message: offset, key, headers, times, id.
        original = pq.read_table(setup.stream_dir / before_manifest.segments[12].file)
        [row] = original.filter(original.column("offset").to_numpy() == 1234).to_pylist()
        copy = pq.read_table(carried.path).to_pylist()
        assert copy[0] == row
        assert row["key"] == b"k2"
        assert row["headers"] == [("trace", "t1234")]

        # Manifest: the new version names only the carried file; old versions' files stay.
        after = setup.manifest()
        assert [s.file for s in after.segments] == [carried.entry.file]
        assert after.version > before_manifest.version
        assert {e.file for e in after.expired} == {s.file for s in before_manifest.segments}
        assert manifest_read(setup.stream_dir, before_manifest) == list(range(2000))
        assert manifest_read(setup.stream_dir, after) == [1234, 1999]
        # A plain listing sees the old files only (the carried one is hidden): no duplicate.
        assert plain_listing(setup.stream_dir) == list(range(2000))

        # Past the grace period: promoted to its plain name, the old files deleted.
        await setup.later(GRACE_S)
        [promoted] = partition.segment_log.segments
        assert not promoted.entry.staged
        assert promoted.path.name == "segment-00000000000000001200-00000000000000001999.parquet"
        assert plain_listing(setup.stream_dir) == [1234, 1999]
        assert manifest_read(setup.stream_dir, setup.manifest()) == [1234, 1999]
        assert manifest_read(setup.stream_dir, after) == [1234, 1999], "staged name kept"
        await setup.later(GRACE_S)
        assert setup.manifest().expired == ()
        assert setup.disk_bytes() < before_bytes / 20
        assert offsets_in(await read_everything(partition, 1200)) == [1234, 1999]
    finally:
        await setup.store.close()


async def test_leading_acked_segments_are_dropped_and_the_start_moves(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        partition = await setup.filled()
        # Everything below 1500 acked by both; 1500.. still needed by one.
        await partition.commit_cursor(1, "a", Cursor(1500))
        await partition.commit_cursor(1, "b", Cursor(2000))
        await setup.later(1)
        assert partition.offsets().start_offset == 1500
        assert [s.first_offset for s in partition.segment_log.segments] == list(
            range(1500, 2000, BATCH)
        )
        assert setup.manifest().start_offsets == {0: 1500}
        assert offsets_in(await read_everything(partition, 1500)) == list(range(1500, 2000))
    finally:
        await setup.store.close()


async def test_without_any_subscription_nothing_is_removed(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        partition = await setup.filled()
        await setup.later(1)
        await setup.later(GRACE_S)
        assert len(partition.segment_log.segments) == BATCHES
        assert setup.manifest().expired == ()
    finally:
        await setup.store.close()


async def test_one_subscription_that_acked_nothing_keeps_everything(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        partition = await setup.filled()
        await partition.commit_cursor(1, "done", Cursor(2000))
        await partition.commit_cursor(1, "idle", Cursor(0))
        await setup.later(1)
        assert len(partition.segment_log.segments) == BATCHES
        assert all(s.complete for s in partition.segment_log.segments)
    finally:
        await setup.store.close()


async def test_limits_policy_ignores_acks(tmp_path: Path) -> None:
    setup = Setup(tmp_path, interest=False)
    try:
        partition = await setup.filled()
        await partition.commit_cursor(1, "done", Cursor(2000))
        await setup.later(1)
        assert len(partition.segment_log.segments) == BATCHES
    finally:
        await setup.store.close()


async def test_time_limits_still_apply_on_top_of_interest(tmp_path: Path) -> None:
    setup = Setup(tmp_path, retention_ms=10_000)
    try:
        partition = await setup.filled()
        await partition.commit_cursor(1, "idle", Cursor(0))  # needs everything
        await setup.later(30)  # every message is 30 s old
        assert partition.segment_log.segments == ()
        assert partition.offsets().start_offset == 2000
    finally:
        await setup.store.close()


async def test_carried_segments_and_their_state_survive_reloads(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        partition = await setup.filled()
        await partition.commit_cursor(1, "billing", acked_all_but(7, 1234))
        await setup.later(1)
        assert offsets_in(await read_everything(partition, 0)) == [7, 1234, 1999]
    finally:
        await setup.store.close()

    # Reload while staged: the carried file is found under _carried/ and wins.
    again = Setup(tmp_path)
    try:
        partition = await again.store.get(STREAM, 0)
        assert offsets_in(await read_everything(partition, 0)) == [7, 1234, 1999]
        [segment] = partition.segment_log.segments
        assert segment.entry.staged
        assert partition.offsets().next_offset == 2000
        # One more ack frees too little of it to be worth a rewrite (a third)...
        await partition.open(2)
        await partition.commit_cursor(2, "billing", Cursor(0, (OffsetRange(7, 7),)))
        await again.later(1)
        assert partition.segment_log.segments == (segment,)
        # ... two of three is: rewritten again (generation 2), still one file.
        await partition.commit_cursor(2, "billing", Cursor(0, (OffsetRange(1234, 1234),)))
        await again.later(1)
        [segment] = partition.segment_log.segments
        assert segment.generation == 2
        assert offsets_in(await read_everything(partition, 0)) == [1999]
        await again.later(GRACE_S)
        await again.later(GRACE_S)
        assert not partition.segment_log.segments[0].entry.staged
    finally:
        await again.store.close()

    # Reload after promotion: the plain file wins; new appends continue at 2000.
    third = Setup(tmp_path)
    try:
        partition = await third.store.get(STREAM, 0)
        assert offsets_in(await read_everything(partition, 0)) == [1999]
        assert third.manifest().expired == ()
        await partition.open(3)
        assert await partition.append(3, [batch(2000, 5)]) == 2005
        assert offsets_in(await read_everything(partition, 0)) == [1999, *range(2000, 2005)]
    finally:
        await third.store.close()


async def test_a_crash_before_the_manifest_recorded_a_carried_segment(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        partition = await setup.filled()
        await partition.commit_cursor(1, "billing", acked_all_but(1234))
        manifest_before = setup.manifest()

        async def crash(stream: str, change: Callable[[Manifest], Manifest]) -> None:
            raise OSError("killed before the manifest was written")

        limits = ReclaimLimits(small_bytes=1, max_run_bytes=1 << 30)
        segments_before = partition.segment_log.segments
        with pytest.raises(OSError, match="killed"):
            await Reclaimer(crash, limits, 0.0).reclaim(partition)
        assert setup.manifest() == manifest_before, "the manifest never heard of it"
        assert partition.segment_log.segments == segments_before, "reads see no change"
        assert offsets_in(await read_everything(partition, 0)) == list(range(2000))
    finally:
        await setup.store.close()

    again = Setup(tmp_path)
    try:
        partition = await again.store.get(STREAM, 0)
        # The drop of 0-1199 was never recorded, and their files are still there: kept.
        *dropped, segment = partition.segment_log.segments
        assert [s.first_offset for s in dropped] == list(range(0, 1200, BATCH))
        assert segment.entry.staged, "the carried file, complete on disk, replaces 1200-1999"
        manifest = again.manifest()
        assert [s.file for s in manifest.segments] == [s.entry.file for s in (*dropped, segment)]
        replaced = {s.file for s in manifest_before.segments if s.first_offset >= 1200}
        assert {e.file for e in manifest.expired} == replaced
        assert offsets_in(await read_everything(partition, 0)) == [*range(1200), 1234, 1999]
        assert plain_listing(again.stream_dir) == list(range(2000)), "old files until the grace"
        # The next round finishes the job.
        await again.later(1)
        assert partition.offsets().start_offset == 1200
        assert offsets_in(await read_everything(partition, 1200)) == [1234, 1999]
    finally:
        await again.store.close()


async def test_the_wal_is_emptied_once_everything_is_sealed(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        partition = await setup.filled()
        wal = sorted((partition.directory / "_wal").iterdir())
        assert [p.name for p in wal] == ["00000000000000002000.log"]
        assert wal[0].stat().st_size == 0
    finally:
        await setup.store.close()


def test_stored_batches_from_sparse_rows_never_span_a_gap() -> None:
    full = build_table([batch(0, 10)])
    sparse = full.filter(full.column("offset").to_numpy() % 3 != 1)  # 0, 2, 3, 5, 6, 8, 9
    batches = to_stored_batches(sparse)
    assert [(b.base_offset, b.count) for b in batches] == [(0, 1), (2, 2), (5, 2), (8, 2)]
