"""For tests that drive a `PartitionStore` directly: a clock they set, batches, and a
store with sealed segments to read."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_storage.model import StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.sealer import RetentionFor, Sealer, SealOptions
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions

#: The time the clock starts at (µs since the epoch).
T_US = 1_800_000_000_000_000


class Clock:
    """Seconds since the epoch, moved by the test (`now`)."""

    def __init__(self) -> None:
        self.now = T_US / 1e6

    def __call__(self) -> float:
        return self.now


def offset_payloads(base: int, count: int, producer: str | None = None) -> bytes:
    """The Arrow IPC of `count` messages whose payloads name their offsets from `base`
    on (``m<offset>``), with no keys, headers, ids or event times."""
    return encode_batch(
        BatchColumns(
            payloads=[f"m{o}".encode() for o in range(base, base + count)],
            keys=[None] * count,
            headers=[None] * count,
            ids=[None] * count,
            event_times_us=[None] * count,
            producer=producer,
        )
    )


def stored_batch(base: int, count: int, publish_time_us: int) -> StoredBatch:
    """Offsets `base`.. with payloads ``m<offset>``, published at `publish_time_us`."""
    return StoredBatch(base, count, publish_time_us, offset_payloads(base, count))


@dataclass
class Sealed:
    """A store's stream "events", partition 0, with its sealer and its directory."""

    partition: Partition
    sealer: Sealer
    stream_dir: str


@contextlib.asynccontextmanager
async def five_sealed_segments(
    data: Path,
    clock: Clock,
    retention_for: RetentionFor,
    batch: Callable[[int, int], StoredBatch],
    grace_s: float,
) -> AsyncIterator[Sealed]:
    """A `PartitionStore` in `data` whose stream "events", partition 0, holds offsets
    0-49 in five sealed segments of ten (`batch(base, 10)` each); closed after."""
    store = PartitionStore(
        data,
        WalOptions(),
        seal_options=SealOptions(segment_bytes=1, retention_grace_s=grace_s),
        retention_for=retention_for,
        clock=clock,
    )
    sealer = store.sealer
    assert sealer is not None
    try:
        partition = await store.get("events", 0)
        await partition.open(1)
        for base in range(0, 50, 10):
            await partition.append(1, [batch(base, 10)])
        await sealer.seal_all()
        assert len(partition.segment_log.segments) == 5
        yield Sealed(partition, sealer, str(data / "streams" / "events"))
    finally:
        await store.close()
