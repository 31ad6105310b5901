"""A batch that cannot be sealed is quarantined, and sealing goes on.

The bad batch is put straight into a partition's WAL, past the gateway's and
storage's own validation, as a bug or an older version might have stored it.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from prometheus_client import REGISTRY
from storage_testkit import make_batch

from tamto_storage.model import StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.quarantine import QUARANTINE_DIR
from tamto_storage.sealer import SealOptions
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions
from tamto_testing.crafted_batches import CRAFTED
from tamto_testing.waiting import eventually

#: A batch whose payload offsets decrease (`[0, 9, 2]`): once in the WAL, it failed every
#: sealing round until quarantined.
BAD = CRAFTED["payload offsets decrease"]
OPTIONS = SealOptions(max_age_s=0.3, check_interval_s=0.1)
#: How long sealing may take here: the age that makes it due, a round, and slack
#: for a shared CI machine.
USUAL_S = OPTIONS.max_age_s + OPTIONS.check_interval_s + 5.0


async def inject(partition: Partition, base: int) -> StoredBatch:
    """Write the bad batch into the WAL directly (no validation), as the next batch."""
    bad = StoredBatch(base, BAD.count, 1_700_000_000_000_000 + base, BAD.arrow_ipc)
    await partition._wal.append([bad], partition.epoch)
    return bad


def all_sealed(partition: Partition) -> bool:
    return partition.segment_log.end_offset == partition.offsets().next_offset


def quarantined_gauge(stream: str) -> float:
    value = REGISTRY.get_sample_value("tamto_storage_quarantined_batches", {"stream": stream})
    return value or 0.0


async def sealed_in_time(partition: Partition) -> None:
    await eventually(lambda: all_sealed(partition), USUAL_S, f"{partition.id} sealed")


async def test_a_bad_batch_is_quarantined_and_every_stream_keeps_sealing(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    bad_stream, others = f"bad-{tag}", [f"good-{tag}-{i}" for i in range(3)]
    store = PartitionStore(tmp_path / "data", WalOptions(), seal_options=OPTIONS)
    try:
        bad_partition = await store.get(bad_stream, 0)
        await bad_partition.open(1)
        await bad_partition.append(1, [make_batch(0)])
        bad = await inject(bad_partition, 3)
        after = bad.end_offset
        await bad_partition.append(1, [make_batch(after)])  # makes the partition due
        good = []
        for stream in others:
            partition = await store.get(stream, 0)
            await partition.open(1)
            await partition.append(1, [make_batch(0), make_batch(3)])
            good.append(partition)
        started = time.monotonic()
        store.start_sealer()
        for partition in good:
            await sealed_in_time(partition)
        assert time.monotonic() - started < USUAL_S
        await eventually(lambda: all_sealed(bad_partition), USUAL_S, "the bad partition sealed")

        # Kept, with its reason, counted and listed.
        first, last = bad.base_offset, bad.end_offset - 1
        kept = bad_partition.directory / QUARANTINE_DIR
        assert (kept / f"{first}-{last}.arrow").read_bytes() == BAD.arrow_ipc
        assert "column 'payload'" in (kept / f"{first}-{last}.reason").read_text()
        assert bad_partition.quarantined() == [f"{first}-{last}"]
        assert quarantined_gauge(bad_stream) == 1
        # Sealed past: readers skip its offsets, everything else is served.
        assert [b.base_offset for b in (await bad_partition.read(0, 0, 1 << 20)).batches] == [0]
        await eventually(
            lambda: bad_partition._wal.start_offset > first, USUAL_S, "the WAL trimmed past it"
        )
        past = (await bad_partition.read(first, 0, 1 << 20)).batches
        assert [b.base_offset for b in past] == [after]
    finally:
        await store.close()

    # A restart loads the empty segment that seals past it and counts it again.
    store = PartitionStore(tmp_path / "data", WalOptions(), seal_options=OPTIONS)
    try:
        reloaded = await store.get(bad_stream, 0)
        assert reloaded.quarantined() == [f"{first}-{last}"]
        assert all_sealed(reloaded)
        assert quarantined_gauge(bad_stream) == 2  # one process: the gauge counts both loads
    finally:
        await store.close()
