from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from tamto_protocol.v1 import storage_pb2
from tamto_router.batch_cache import BatchCache
from tamto_router.model import Batch
from tamto_router.storage_api import Piece
from tamto_router.storage_client import StorageClient
from tamto_router.stored_batch_proto import batch_to_proto

KEY = ("s", 0)


def batch(base: int, n: int, size: int = 10) -> Batch:
    return Batch(base, n, 0, bytes(size))


def test_reads_contiguous_batches_from_the_one_holding_the_offset() -> None:
    cache = BatchCache(1000)
    cache.add(KEY, [batch(0, 5), batch(5, 5), batch(10, 5)])
    got = cache.get(KEY, 7, 0, 1000)
    assert got is not None
    assert [b.base_offset for b in got] == [5, 10]
    assert cache.get(KEY, 15, 0, 1000) is None, "past the end: storage decides"
    assert cache.get(("s", 1), 0, 0, 1000) is None


def test_stops_at_a_gap_and_at_the_limits() -> None:
    cache = BatchCache(1000)
    cache.add(KEY, [batch(0, 5), batch(5, 5), batch(20, 5)])
    assert [b.base_offset for b in cache.get(KEY, 0, 0, 1000) or []] == [0, 5]
    assert [b.base_offset for b in cache.get(KEY, 3, 2, 1000) or []] == [0]
    assert [b.base_offset for b in cache.get(KEY, 0, 6, 1000) or []] == [0, 5]
    # The first batch comes whatever its size; the next only within max_bytes.
    assert [b.base_offset for b in cache.get(KEY, 0, 0, 15) or []] == [0]


def test_evicts_the_oldest_insertions_beyond_its_budget() -> None:
    cache = BatchCache(30)
    cache.add(KEY, [batch(0, 1), batch(1, 1)])
    cache.add(("t", 0), [batch(0, 1)])
    cache.add(KEY, [batch(2, 1)])
    assert cache.bytes == 30
    assert cache.get(KEY, 0, 0, 100) is None
    assert [b.base_offset for b in cache.get(KEY, 1, 0, 100) or []] == [1, 2]
    assert cache.get(("t", 0), 0, 0, 100) is not None


def test_batches_read_from_storage_take_at_most_their_share_from_appended_ones() -> None:
    # A backlog one batch larger than the cache: the consumer draining it reads
    # the evicted first batch from storage, then must find the rest in memory.
    cache = BatchCache(80)  # reads may take 10 bytes (READ_SHARE) from appended batches
    cache.add(KEY, [batch(i, 1) for i in range(9)])
    assert cache.get(KEY, 0, 0, 100) is None, "the oldest appended batch was evicted"
    cache.add(KEY, [batch(0, 1)], read=True)
    assert [b.base_offset for b in cache.get(KEY, 0, 1, 100) or []] == [0]
    assert cache.get(KEY, 1, 0, 100) is None, "taken by the read, within its share"
    cache.add(KEY, [batch(1, 1)], read=True)
    assert cache.get(KEY, 0, 0, 100) is None, "beyond the share reads replace their own"
    assert [b.base_offset for b in cache.get(KEY, 1, 0, 100) or []] == list(range(1, 9))
    assert cache.bytes == 80


def test_appended_batches_evict_reads_beyond_their_share_first() -> None:
    cache = BatchCache(80)  # the reads' share: 10 bytes
    cache.add(KEY, [batch(0, 1), batch(1, 1)], read=True)
    cache.add(KEY, [batch(i, 1) for i in range(2, 8)])
    cache.add(KEY, [batch(8, 1)])
    assert cache.get(KEY, 0, 0, 100) is None, "the read beyond the share went first"
    assert [b.base_offset for b in cache.get(KEY, 1, 0, 100) or []] == list(range(1, 9))
    cache.add(KEY, [batch(9, 1)])  # reads are within their share now: appended go
    assert [b.base_offset for b in cache.get(KEY, 1, 1, 100) or []] == [1]
    assert [b.base_offset for b in cache.get(KEY, 3, 0, 100) or []] == list(range(3, 10))
    cache.drop(KEY)
    assert (cache.bytes, len(cache)) == (0, 0)


def test_overlapping_batches_are_not_inserted_twice() -> None:
    cache = BatchCache(1000)
    cache.add(KEY, [batch(0, 10)])
    cache.add(KEY, [batch(5, 10), batch(0, 10), batch(10, 2)])
    assert [(b.base_offset, b.count) for b in cache.get(KEY, 0, 0, 1000) or []] == [
        (0, 10),
        (10, 2),
    ]
    assert cache.bytes == 20


def test_drop_forgets_a_partition() -> None:
    cache = BatchCache(1000)
    cache.add(KEY, [batch(0, 5)])
    cache.add(("s", 1), [batch(0, 5)])
    cache.drop(KEY)
    assert cache.get(KEY, 0, 0, 100) is None
    assert cache.get(("s", 1), 0, 0, 100) is not None
    assert cache.bytes == 10
    cache.add(KEY, [batch(0, 5)])  # the eviction order forgot it too: no double count
    assert cache.bytes == 20


class CountingStub:
    """Stands in for the storage node (a `StorageApi`): answers reads from `batches`,
    counts them."""

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches
        self.reads = 0

    async def call(self, method: str, request: Any, timeout_s: float) -> Any:
        if method == "OpenPartition":
            return storage_pb2.OpenPartitionResponse(start_offset=0, next_offset=0)
        assert method == "Read", method
        self.reads += 1
        found = [b for b in self.batches if b.end > request.from_offset][:2]
        return storage_pb2.ReadResponse(
            batches=[batch_to_proto(b) for b in found],
            next_offset=found[-1].end if found else request.from_offset,
        )

    async def append(
        self, stream: str, partition: int, epoch: int, pieces: Sequence[Piece], timeout_s: float
    ) -> storage_pb2.StorageAppendResponse:
        return storage_pb2.StorageAppendResponse(next_offset=0)

    async def close(self) -> None:
        pass


def client_with(stub: CountingStub, cache: BatchCache) -> StorageClient:
    return StorageClient(grpc.aio.insecure_channel("127.0.0.1:9"), 1.0, cache=cache, api=stub)


async def test_the_storage_client_reads_through_the_cache() -> None:
    stub = CountingStub([batch(0, 5), batch(5, 5), batch(10, 5)])
    client = client_with(stub, BatchCache(1000))
    first, nxt = await client.read("s", 0, 0, 100)
    assert ([b.base_offset for b in first], nxt, stub.reads) == ([0, 5], 10, 1)
    again, _ = await client.read("s", 0, 6, 100)
    assert ([b.base_offset for b in again], stub.reads) == ([5], 1), "served from memory"
    rest, _ = await client.read("s", 0, 10, 100)
    assert ([b.base_offset for b in rest], stub.reads) == ([10], 2)


async def test_appended_batches_are_read_from_memory_until_the_partition_reopens() -> None:
    stub = CountingStub([])
    client = client_with(stub, BatchCache(1000))
    await client.append("s", 0, 1, [batch(0, 3), batch(3, 3)])
    got, nxt = await client.read("s", 0, 2, 100)
    assert ([b.base_offset for b in got], nxt, stub.reads) == ([0, 3], 6, 0)
    await client.open_partition("s", 0, 2)
    got, _ = await client.read("s", 0, 2, 100)
    assert (got, stub.reads) == ([], 1), "after a reopen only storage knows"
