"""Truncating a replica's stale tail where its node already sealed it
(`tamto_storage.sealed_truncate`, docs/cluster.md section 2): segments past the new
end go, the one holding it is rewritten to end there, the manifest and the WAL
follow, and a restart loads the cut log; refused where the segment store has the
offsets, or as the WAL truncation refuses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from storage_testkit import append_batches, check_batch, make_batch, payloads, read_all

from tamto_common.errors import FailedPrecondition
from tamto_protocol.segment import read_manifest, segment_file_name
from tamto_storage.model import StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.publisher import Publisher
from tamto_storage.sealed_truncate import truncate_sealed
from tamto_storage.sealed_truncate_files import STAGING_DIR
from tamto_storage.sealer import SealOptions
from tamto_storage.segment_store import SegmentStore
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions

STREAM = "orders"
#: One segment for everything sealed at once, and the WAL trimmed after sealing.
ONE_SEGMENT = SealOptions(segment_bytes=1 << 20)
#: A segment per batch, and the sealed WAL kept as read tail.
WITH_TAIL = SealOptions(segment_bytes=1, wal_tail_bytes=1 << 20)


def other_batch(base_offset: int) -> StoredBatch:
    theirs = make_batch(base_offset + 1000)
    return StoredBatch(base_offset, theirs.count, theirs.publish_time_us, theirs.arrow_ipc)


def segment_names(pdir: Path) -> list[str]:
    return sorted(p.name for p in pdir.glob("segment-*.parquet"))


def recorded(data: Path) -> list[str]:
    return sorted(s.file for s in read_manifest(data / "streams" / STREAM).segments)


async def stale_tail(store: PartitionStore, sealed_to: int = 30) -> Partition:
    """Offsets below `sealed_to` sealed and the next 6 only in the WAL, all written by epoch 1;
    the partition is open for epoch 2 (the new owner)."""
    partition = await store.get(STREAM, 0)
    await partition.open(1)
    await append_batches(partition, 1, range(0, sealed_to, 3))
    assert store.sealer is not None
    await store.sealer.seal_all()
    await append_batches(partition, 1, range(sealed_to, sealed_to + 6, 3))
    await partition.open(2)
    return partition


@pytest.mark.parametrize("options", [ONE_SEGMENT, WITH_TAIL], ids=["rewritten", "dropped"])
async def test_a_sealed_stale_tail_is_cut_and_the_cut_log_survives_a_restart(
    tmp_path: Path, options: SealOptions
) -> None:
    data = tmp_path / "data"
    store = PartitionStore(data, WalOptions(), seal_options=options)
    partition = await stale_tail(store)
    pdir = partition.directory
    with pytest.raises(FailedPrecondition, match="are sealed"):
        await partition.truncate(2, 15)

    assert await truncate_sealed(store, partition, 2, 15) == 15
    assert partition.offsets().next_offset == 15
    assert partition.segment_log.end_offset == 15
    expected = (
        [segment_file_name(0, 14)]
        if options is ONE_SEGMENT
        else [segment_file_name(b, b + 2) for b in range(0, 15, 3)]
    )
    assert segment_names(pdir) == expected
    assert recorded(data) == [f"partition=0/{name}" for name in expected]
    assert not list((pdir / STAGING_DIR).glob("*"))
    batches = await read_all(partition, 0)
    assert batches[-1].end_offset == 15
    for batch in batches:
        check_batch(batch)
    await partition.append(2, [other_batch(15)])  # the log's own entries take the offsets
    await store.close()

    again = PartitionStore(data, WalOptions(), seal_options=options)
    reloaded = await again.get(STREAM, 0)
    assert reloaded.offsets().next_offset == 18
    batches = await read_all(reloaded, 0)
    for batch in batches[:-1]:
        check_batch(batch)
    assert payloads(batches[-1]) == payloads(other_batch(15))
    assert sum(b.count for b in batches) == 18
    await again.close()
    assert recorded(data) == sorted(  # sealed at close: the new entries too
        f"partition=0/{name}" for name in segment_names(pdir)
    )


async def test_a_sealed_truncation_refuses_what_the_wal_truncation_refuses(
    tmp_path: Path,
) -> None:
    store = PartitionStore(tmp_path / "data", WalOptions(), seal_options=ONE_SEGMENT)
    partition = await stale_tail(store)
    with pytest.raises(FailedPrecondition, match="stale epoch"):
        await truncate_sealed(store, partition, 1, 15)
    with pytest.raises(FailedPrecondition, match="offset 16 is inside a batch"):
        await truncate_sealed(store, partition, 2, 16)
    await partition.append(2, [make_batch(36)])  # the current ledger's
    with pytest.raises(FailedPrecondition, match="written with the current epoch 2"):
        await truncate_sealed(store, partition, 2, 15)
    assert partition.offsets().next_offset == 39  # nothing went
    assert segment_names(partition.directory) == [segment_file_name(0, 29)]
    assert await truncate_sealed(store, partition, 2, 40) == 39  # past the end: no-op
    await store.close()


async def test_offsets_the_segment_store_committed_are_refused_as_sealed(
    tmp_path: Path,
) -> None:
    async def always(stream: str, partition: int) -> bool:
        return True

    segment_store = SegmentStore.open((tmp_path / "store").as_uri())
    publisher = Publisher(segment_store, always)
    store = PartitionStore(
        tmp_path / "data", WalOptions(), seal_options=WITH_TAIL, publisher=publisher
    )
    partition = await stale_tail(store)
    assert segment_store.committed_end(STREAM, 0) == 30
    with pytest.raises(FailedPrecondition, match="below 30 are sealed and committed"):
        await truncate_sealed(store, partition, 2, 15)
    assert partition.offsets().next_offset == 36
    # Past the store's end, the local segments are cut.
    assert await truncate_sealed(store, partition, 2, 33) == 33
    await store.close()


async def test_a_segment_whose_local_file_was_reclaimed_is_refused_as_sealed(
    tmp_path: Path,
) -> None:
    store = PartitionStore(tmp_path / "data", WalOptions(), seal_options=WITH_TAIL)
    partition = await stale_tail(store)
    (partition.directory / segment_file_name(18, 20)).unlink()  # as the store cache does
    with pytest.raises(FailedPrecondition, match="are sealed and committed"):
        await truncate_sealed(store, partition, 2, 15)
    assert partition.offsets().next_offset == 36
    await store.close()


async def test_a_rewrite_left_staged_by_a_crash_is_finished_or_undone_at_load(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    store = PartitionStore(data, WalOptions(), seal_options=ONE_SEGMENT)
    partition = await stale_tail(store, sealed_to=15)
    await store.close()  # seals 15-20 as a segment of its own
    pdir = partition.directory
    assert segment_names(pdir) == [segment_file_name(0, 14), segment_file_name(15, 20)]
    staging = pdir / STAGING_DIR
    staging.mkdir()
    # Crashed before the old segment went: the staged rewrite is undone.
    shutil.copy(pdir / segment_file_name(0, 14), staging / segment_file_name(0, 8))
    again = PartitionStore(data, WalOptions(), seal_options=ONE_SEGMENT)
    reloaded = await again.get(STREAM, 0)
    assert reloaded.offsets().next_offset == 21
    assert not list(staging.iterdir())
    await again.close()
    # Crashed after the old segment went: the staged rewrite takes its place.
    (pdir / segment_file_name(15, 20)).rename(staging / segment_file_name(15, 20))
    last = PartitionStore(data, WalOptions(), seal_options=ONE_SEGMENT)
    reloaded = await last.get(STREAM, 0)
    assert segment_names(pdir) == [segment_file_name(0, 14), segment_file_name(15, 20)]
    assert reloaded.offsets().next_offset == 21
    assert not list(staging.iterdir())
    await last.close()
