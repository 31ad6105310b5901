"""Checks of bytes at rest: page checksums and file digests of segments, damage isolation."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from storage_testkit import check_batch, flip_byte, make_batch

from tamto_common.errors import DataLoss, damaged_offsets
from tamto_protocol.segment import read_manifest, segment_file_name
from tamto_storage.integrity import file_digest
from tamto_storage.model import PartitionId
from tamto_storage.partition import Partition
from tamto_storage.sealer import SealOptions
from tamto_storage.segment_reads import read_rows
from tamto_storage.segments import write_segment
from tamto_storage.store import PartitionStore, partition_dir
from tamto_storage.wal import WalOptions

BIG = 1 << 20


async def sealed_store(data: Path, segments: int, unsealed: int = 1) -> None:
    """orders/0 with `segments` sealed segments of one 3-message batch each, then
    `unsealed` batches only in the WAL; the store is closed (without sealing them)."""
    store = PartitionStore(data, WalOptions(), seal_options=SealOptions(segment_bytes=1))
    partition = await store.get("orders", 0)
    await partition.open(1)
    for i in range(segments):
        await partition.append(1, [make_batch(3 * i)])
    sealer = store.sealer
    assert sealer is not None
    await sealer.seal_all()
    for i in range(segments, segments + unsealed):
        await partition.append(1, [make_batch(3 * i)])
    await partition.close()


def segment_path(data: Path, first: int, last: int) -> Path:
    return partition_dir(data, PartitionId("orders", 0)) / segment_file_name(first, last)


async def test_sealed_segments_record_their_digest_in_the_manifest(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await sealed_store(data, 2, unsealed=0)
    entries = read_manifest(data / "streams" / "orders").segments
    assert [e.first_offset for e in entries] == [0, 3]
    for entry in entries:
        path = data / "streams" / "orders" / entry.file
        assert entry.digest == file_digest(path)
        assert entry.digest.startswith("crc32:")


def test_a_flipped_bit_in_a_page_fails_its_checksum(tmp_path: Path) -> None:
    segment = write_segment(0, tmp_path, [make_batch(0, count=50, pad=200)])
    column = pq.read_metadata(segment.path).row_group(0).column(4)  # payload, one page
    assert column.path_in_schema == "payload"
    # The last byte of the page's (compressed) data, past its header.
    flip_byte(segment.path, column.data_page_offset + column.total_compressed_size - 1)
    with pytest.raises(OSError, match="CRC checksum verification failed"):
        read_rows(segment.path, 0, 0, BIG)


@pytest.mark.parametrize("where", ["middle", "footer"])
async def test_a_damaged_segment_loses_its_range_only(tmp_path: Path, where: str) -> None:
    data = tmp_path / "data"
    await sealed_store(data, 3)
    damaged = segment_path(data, 3, 5)
    size = damaged.stat().st_size
    flip_byte(damaged, size // 2 if where == "middle" else size - 20)

    store = PartitionStore(data, WalOptions(), seal_options=SealOptions(segment_bytes=1))
    try:
        partition = await store.get("orders", 0)
        assert partition.offsets().next_offset == 12
        for offset in (0, 6, 9):  # before, after and in the WAL: readable
            result = await partition.read(offset, 3, BIG)
            check_batch(result.batches[0])
            assert result.batches[0].base_offset == offset
        for offset in (3, 4, 5):
            with pytest.raises(DataLoss) as info:
                await partition.read(offset, 0, BIG)
            assert str(damaged) in str(info.value)
            assert damaged_offsets(str(info.value)) == (3, 5)
        # Publishing goes on: the damage is sealed history, not the log's end.
        await partition.open(2)
        assert await partition.append(2, [make_batch(12)]) == 15
        assert [line.split(":")[0] for line in partition.damage()] == [str(damaged)]
    finally:
        await store.close()


async def test_wal_damage_keeps_the_offsets_below_it_readable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    pdir = partition_dir(data, PartitionId("orders", 0))
    partition = await Partition.load(PartitionId("orders", 0), pdir, WalOptions())
    await partition.open(1)
    batches = [make_batch(3 * i) for i in range(4)]
    for batch in batches:
        await partition.append(1, [batch])
    await partition.close()
    (wal,) = sorted((pdir / "_wal").glob("*.log"))
    second = 36 + len(batches[0].arrow_ipc)  # the second frame's header
    flip_byte(wal, second + 36 + 10)

    partition = await Partition.load(PartitionId("orders", 0), pdir, WalOptions())
    try:
        offsets = await partition.open(2)  # claiming works: the router can serve what is whole
        assert (offsets.start_offset, offsets.next_offset) == (0, 12)  # frames past it: 6-11
        check_batch((await partition.read(0, 0, BIG)).batches[0])
        with pytest.raises(DataLoss) as info:
            await partition.read(3, 0, BIG)
        assert damaged_offsets(str(info.value)) == (3, None)
        assert str(wal) in str(info.value)
        with pytest.raises(DataLoss):  # appending would reuse acknowledged offsets
            await partition.append(2, [make_batch(3)])
    finally:
        await partition.close()


async def test_a_footer_that_disagrees_with_the_manifest_is_damage(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await sealed_store(data, 3)
    damaged = segment_path(data, 3, 5)
    content = damaged.read_bytes()
    # The footer's newest publish time, one digit changed: the file still parses.
    newest = str(read_manifest(data / "streams" / "orders").segments[1].max_publish_time_us)
    at = content.rindex(newest.encode()) + len(newest) - 1
    damaged.write_bytes(content[:at] + bytes([content[at] ^ 0x01]) + content[at + 1 :])
    store = PartitionStore(data, WalOptions())
    try:
        partition = await store.get("orders", 0)
        with pytest.raises(DataLoss, match="disagrees with its manifest entry"):
            await partition.read(3, 0, BIG)
        check_batch((await partition.read(6, 0, BIG)).batches[0])
    finally:
        await store.close()
