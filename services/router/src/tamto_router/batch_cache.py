"""Recently appended and recently read batches, kept in the router's memory.

Delivery reads the partition's log at the offsets subscriptions need. Most of
those reads are of data the router appended itself a moment ago (live
consumers) or read a moment ago (a consumer whose credit allowed only part of
a read, several subscriptions at one position, a redelivery): serving them from
memory saves a storage round trip, a file read and a CRC check per delivery,
and it is what lets the router deliver fresh data as soon as storage has made
it durable (DESIGN.md §5: "router sends batches from its in-memory tail").

The cache is shared by every partition of the router and bounded in bytes;
the oldest insertions are evicted first. A batch is only ever inserted once
storage holds it durably (after a successful append, or as read), and a
partition's entries are dropped whenever the partition is (re)opened, so an
entry is always what storage holds at those offsets.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tamto_router.storage_client import Batch

PartitionKey = tuple[str, int]


@dataclass
class _Partition:
    #: Cached batches by base offset, and those base offsets sorted.
    batches: dict[int, Batch] = field(default_factory=dict)
    bases: list[int] = field(default_factory=list)


class BatchCache:
    """Batches by (stream, partition) and offset, at most `max_bytes` of Arrow data."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._partitions: dict[PartitionKey, _Partition] = {}
        #: Insertion order over all partitions, for eviction.
        self._order: OrderedDict[tuple[str, int, int], int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order)

    def add(self, key: PartitionKey, batches: list[Batch]) -> None:
        """Remember durable `batches` of a partition (overlapping ones are skipped)."""
        if self.max_bytes <= 0:
            return
        part = self._partitions.get(key)
        for batch in batches:
            size = len(batch.arrow_ipc)
            if batch.count <= 0 or size > self.max_bytes:
                continue
            if part is None:
                part = self._partitions[key] = _Partition()
            if batch.base_offset in part.batches or self._overlaps(part, batch):
                continue
            part.batches[batch.base_offset] = batch
            bisect.insort(part.bases, batch.base_offset)
            self._order[(key[0], key[1], batch.base_offset)] = size
            self.bytes += size
        while self.bytes > self.max_bytes and self._order:
            (stream, partition, base), size = self._order.popitem(last=False)
            self._remove((stream, partition), base, size)

    @staticmethod
    def _overlaps(part: _Partition, batch: Batch) -> bool:
        i = bisect.bisect_left(part.bases, batch.base_offset)
        if i > 0 and part.batches[part.bases[i - 1]].end > batch.base_offset:
            return True
        return i < len(part.bases) and part.bases[i] < batch.end

    def _remove(self, key: PartitionKey, base: int, size: int) -> None:
        part = self._partitions.get(key)
        if part is None or part.batches.pop(base, None) is None:
            return
        del part.bases[bisect.bisect_left(part.bases, base)]
        self.bytes -= size
        if not part.bases:
            del self._partitions[key]

    def get(
        self, key: PartitionKey, from_offset: int, max_messages: int, max_bytes: int
    ) -> list[Batch] | None:
        """Contiguous cached batches from the one holding `from_offset`, or None.

        Stops at the first gap, or once `max_messages` messages (0: no limit) or
        `max_bytes` bytes are covered; the first batch is returned whatever its size.
        """
        part = self._partitions.get(key)
        if part is None:
            self.misses += 1
            return None
        i = bisect.bisect_right(part.bases, from_offset) - 1
        if i < 0 or part.batches[part.bases[i]].end <= from_offset:
            self.misses += 1
            return None
        self.hits += 1
        found: list[Batch] = []
        messages = size = 0
        expected = part.bases[i]
        for base in part.bases[i:]:
            if base != expected:
                break
            batch = part.batches[base]
            if found and size + len(batch.arrow_ipc) > max_bytes:
                break
            found.append(batch)
            messages += batch.end - max(from_offset, batch.base_offset)
            size += len(batch.arrow_ipc)
            expected = batch.end
            if max_messages and messages >= max_messages:
                break
        return found

    def drop(self, key: PartitionKey) -> None:
        """Forget a partition (it is being opened: what storage holds may have changed)."""
        part = self._partitions.pop(key, None)
        if part is None:
            return
        for base, batch in part.batches.items():
            self._order.pop((key[0], key[1], base), None)
            self.bytes -= len(batch.arrow_ipc)
