"""Installing a healthy replica's copy over a damaged range (`tamto_storage.replica_repair`).

What the router's repair relies on, without a cluster: a damaged segment or
WAL frame is replaced by a copy that is checked first, the damaged file is kept
under `_damaged/`, the partition serves every offset and takes appends again,
also after a restart; and nothing is installed over data that is not known
damaged, from a stale owner, or from a copy that does not cover the range.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from storage_testkit import check_batch, frame_position, make_batch

from tamto_common.audit import AuditLog
from tamto_common.errors import DataLoss, FailedPrecondition
from tamto_protocol.segment import read_manifest, segment_file_name
from tamto_storage.integrity import file_digest
from tamto_storage.model import PartitionId
from tamto_storage.partition import WAL_DIR, Partition
from tamto_storage.repair_files import DAMAGED_DIR
from tamto_storage.replica_repair import install_copy
from tamto_storage.scrub import verify
from tamto_storage.sealer import SealOptions
from tamto_storage.store import PartitionStore, partition_dir
from tamto_storage.wal import WalOptions

STREAM = "orders"
PID = PartitionId(STREAM, 0)


def store_for(data: Path) -> PartitionStore:
    return PartitionStore(data, WalOptions(), seal_options=SealOptions(segment_bytes=1))


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x08
    path.write_bytes(bytes(data))


async def read_all(partition: Partition, end: int) -> None:
    """Every offset below `end` reads back with its own payloads."""
    offset = 0
    while offset < end:
        result = await partition.read(offset, 0, 1 << 20)
        assert result.batches, f"nothing at {offset}"
        for batch in result.batches:
            check_batch(batch)
        offset = result.next_offset


async def test_a_damaged_segment_is_replaced_by_a_checked_copy(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = store_for(data)
    audit = AuditLog("storage", data / "audit.jsonl", None)
    partition = await store.get(STREAM, 0)
    await partition.open(2)
    for base in (0, 3):
        await partition.append(2, [make_batch(base)])
    assert store.sealer is not None
    await store.sealer.seal_all()
    segment = partition_dir(data, PID) / segment_file_name(3, 5)

    with pytest.raises(FailedPrecondition, match="not known damaged"):  # intact: left alone
        await install_copy(store, partition, 2, 3, [make_batch(3)], audit)
    flip(segment, segment.stat().st_size // 2)
    with pytest.raises(DataLoss, match="offsets 3-5"):
        await partition.read(3, 0, 1 << 20)
    with pytest.raises(FailedPrecondition, match="stale epoch"):
        await install_copy(store, partition, 1, 3, [make_batch(3)], audit)
    with pytest.raises(FailedPrecondition, match="ends at 5"):  # does not cover 3-5
        await install_copy(store, partition, 2, 3, [make_batch(3, count=2)], audit)

    installed = await install_copy(store, partition, 2, 3, [make_batch(3)], audit)
    assert installed.kind == "segment"
    assert installed.damaged_file == partition_dir(data, PID) / DAMAGED_DIR / segment.name
    assert installed.damaged_file.exists()
    assert partition.damage() == []
    await read_all(partition, 6)
    [entry] = [e for e in read_manifest(data / "streams" / STREAM).segments if e.first_offset == 3]
    assert entry.digest == file_digest(segment)
    [record] = [json.loads(line) for line in (data / "audit.jsonl").read_text().splitlines()]
    assert record["action"] == "storage.repair_from_replica"
    assert "offsets 3-5" in record["detail"]
    await store.close()
    await audit.close()
    assert verify(data, STREAM) == []

    again = store_for(data)
    await read_all(await again.get(STREAM, 0), 6)
    await again.close()


async def test_wal_damage_is_sealed_from_the_copy_and_the_wal_starts_again(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    store = store_for(data)
    partition = await store.get(STREAM, 0)
    await partition.open(1)
    batches = [make_batch(base) for base in (0, 3, 6)]
    for batch in batches:
        await partition.append(1, [batch])
    [wal] = sorted((partition_dir(data, PID) / WAL_DIR).iterdir())
    flip(wal, frame_position(batches, 1) + 40)  # inside the frame of offsets 3-5
    await partition.read(0, 0, 1 << 20)  # offsets 0-2 are still served
    with pytest.raises(DataLoss, match="offsets 3-"):
        await partition.read(3, 0, 1 << 20)
    with pytest.raises(FailedPrecondition, match="before this node's log end 9"):
        await install_copy(store, partition, 1, 3, [make_batch(3)])

    installed = await install_copy(store, partition, 1, 3, [make_batch(3), make_batch(6)])
    assert (installed.kind, installed.first_offset, installed.next_offset) == ("wal", 3, 9)
    assert installed.damaged_file.parent.name == DAMAGED_DIR
    assert partition.damage() == []
    await read_all(partition, 9)
    assert await partition.append(1, [make_batch(9)]) == 12  # appends go on after it
    await store.close()
    assert verify(data, STREAM) == []

    again = store_for(data)
    await read_all(await again.get(STREAM, 0), 12)
    await again.close()
