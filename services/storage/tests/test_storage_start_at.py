"""An empty partition started past offset 0 (`OpenPartition.start_at`: a spare replica
receiving a copy of a partition whose start retention moved, docs/cluster.md
section 2): the start is durable across a restart, appends continue from it, the
sealer seals from it, and a partition holding entries refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_testkit import check_batch, make_batch, read_all

from tamto_common.errors import FailedPrecondition
from tamto_storage.manifest import newest_readable
from tamto_storage.sealer import SealOptions
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions

STREAM = "spare"


def store_in(data: Path) -> PartitionStore:
    return PartitionStore(data, WalOptions(file_bytes=8_000), seal_options=SealOptions())


async def test_an_empty_partition_starts_past_zero_durably(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    partition = await store.get(STREAM, 0)
    await partition.open(1)
    offsets = await store.start_partition_at(STREAM, 0, 1, 30)
    assert (offsets.start_offset, offsets.next_offset) == (30, 30)
    assert await store.start_partition_at(STREAM, 0, 1, 30) == offsets  # again: no change
    manifest, _ = newest_readable(tmp_path / "streams" / STREAM)
    assert manifest.start_offsets[0] == 30
    await store.close()

    store = store_in(tmp_path)  # a restart: the start is kept, appends go on from it
    partition = await store.get(STREAM, 0)
    assert (partition.offsets().start_offset, partition.offsets().next_offset) == (30, 30)
    await partition.open(1)
    assert await partition.append(1, [make_batch(30)]) == 33
    with pytest.raises(FailedPrecondition, match="only an empty partition"):
        await store.start_partition_at(STREAM, 0, 1, 60)
    assert store.sealer is not None
    await store.sealer.seal_all()
    assert partition.segment_log.start_offset == 30
    await store.close()

    store = store_in(tmp_path)
    partition = await store.get(STREAM, 0)
    assert (partition.offsets().start_offset, partition.offsets().next_offset) == (30, 33)
    (batch,) = await read_all(partition, 30)
    assert batch.base_offset == 30
    check_batch(batch)
    await store.close()
