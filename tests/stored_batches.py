"""For tests that drive a `PartitionStore` directly: a clock they set, and batches."""

from __future__ import annotations

from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_storage.model import StoredBatch

#: The time the clock starts at (µs since the epoch).
T_US = 1_800_000_000_000_000


class Clock:
    """Seconds since the epoch, moved by the test (`now`)."""

    def __init__(self) -> None:
        self.now = T_US / 1e6

    def __call__(self) -> float:
        return self.now


def stored_batch(base: int, count: int, publish_time_us: int) -> StoredBatch:
    """Offsets `base`.. with payloads ``m<offset>``, published at `publish_time_us`."""
    arrow = encode_batch(
        BatchColumns(
            payloads=[f"m{o}".encode() for o in range(base, base + count)],
            keys=[None] * count,
            headers=[None] * count,
            ids=[None] * count,
            event_times_us=[None] * count,
        )
    )
    return StoredBatch(base, count, publish_time_us, arrow)
