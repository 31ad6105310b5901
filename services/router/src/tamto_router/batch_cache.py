"""Recently appended and recently read batches, kept in the router's memory.

Delivery reads the partition's log at the offsets subscriptions need. Most of
those reads are of data the router appended itself a moment ago (live
consumers) or read a moment ago (a consumer whose credit allowed only part of
a read, several subscriptions at one position, a redelivery): serving them from
memory saves a storage round trip, a file read and a CRC check per delivery,
and it is what lets the router deliver fresh data as soon as storage has made
it durable (DESIGN.md §5: "router sends batches from its in-memory tail").

The cache is shared by every partition of the router and bounded in bytes.
Appended batches and batches read from storage are kept in two insertion
orders. Reads may hold at most `READ_SHARE` of the budget at the expense of
appended batches; beyond it they replace their own oldest. Without that limit a
backlog slightly larger than the cache was read entirely from storage: the
consumer draining it starts at the oldest, evicted, offsets, and each read's
batches evicted the oldest appended ones, which were the very next it needed
(at 100 B, a 5 s backlog: 0.51M msg/s with every read from storage, against
1.05M from a cache that held it). Now reads cost the cached tail at most that
share, and the drain finds the rest in memory. A batch is only ever inserted once
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
    from tamto_router.model import Batch

PartitionKey = tuple[str, int]
#: Share of the budget batches read from storage may take from appended ones.
READ_SHARE = 0.125


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
        #: Insertion order over all partitions, for eviction: appended batches,
        #: and batches read from storage (with their total size).
        self._appended: OrderedDict[tuple[str, int, int], int] = OrderedDict()
        self._read: OrderedDict[tuple[str, int, int], int] = OrderedDict()
        self._read_bytes = 0

    def __len__(self) -> int:
        return len(self._appended) + len(self._read)

    def add(self, key: PartitionKey, batches: list[Batch], *, read: bool = False) -> None:
        """Remember durable `batches` of a partition (overlapping ones are skipped):
        just appended, or `read` from storage (see the module docstring)."""
        if self.max_bytes <= 0:
            return
        order = self._read if read else self._appended
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
            order[(key[0], key[1], batch.base_offset)] = size
            self.bytes += size
            if read:
                self._read_bytes += size
        while self.bytes > self.max_bytes and (self._appended or self._read):
            self._evict_one()

    def _evict_one(self) -> None:
        """Evict the oldest read batch while reads hold more than their share (or
        nothing was appended), else the oldest appended one."""
        over_share = self._read_bytes > READ_SHARE * self.max_bytes
        read = bool(self._read) and (over_share or not self._appended)
        order = self._read if read else self._appended
        (stream, partition, base), size = order.popitem(last=False)
        if read:
            self._read_bytes -= size
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

    def drop_below(self, key: PartitionKey, offset: int) -> None:
        """Forget a partition's batches holding any offset below `offset` (storage's
        start moved there: retention removed them)."""
        part = self._partitions.get(key)
        if part is None:
            return
        for base in [b for b in part.bases if b < offset]:
            size = len(part.batches[base].arrow_ipc)
            self._appended.pop((key[0], key[1], base), None)
            if self._read.pop((key[0], key[1], base), None) is not None:
                self._read_bytes -= size
            self._remove(key, base, size)

    def drop(self, key: PartitionKey) -> None:
        """Forget a partition (it is being opened: what storage holds may have changed)."""
        part = self._partitions.pop(key, None)
        if part is None:
            return
        for base, batch in part.batches.items():
            self._appended.pop((key[0], key[1], base), None)
            if self._read.pop((key[0], key[1], base), None) is not None:
                self._read_bytes -= len(batch.arrow_ipc)
            self.bytes -= len(batch.arrow_ipc)
