"""A partition reopened by its own router keeps its dedup window.

When storage restarts, a full disk refuses an append or the ownership lease is
granted anew, the router's log of a partition fails and the next request reopens
it with a new epoch. If nobody else claimed the partition in between, the log
holds exactly what this router's window recorded up to storage's end, so the
window is kept (cut back to that end) instead of being read back from storage,
which took most of a second per partition (docs/recovery.md). Another owner in
between means a rebuild from storage.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import aetcd
import pyarrow as pa

from tamto_common.errors import Unavailable
from tamto_protocol.batch import ID_TYPE, PAYLOAD_TYPE, encode_record_batch, make_batch
from tamto_router.model import Batch, LogBounds
from tamto_router.ownership import OWNERS, Claim, claim_partition
from tamto_router.partitions import Partitions


class FakeStorage:
    """One storage node's partition: appends land, reads are counted."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.reads = 0

    @property
    def end(self) -> int:
        return self.batches[-1].end if self.batches else 0

    async def open_partition(self, stream: str, partition: int, epoch: int) -> LogBounds:
        return LogBounds(0, self.end)

    async def append(self, stream: str, partition: int, epoch: int, batches: Any) -> None:
        self.batches.extend(batches)

    async def offset_for_time(self, stream: str, partition: int, time_us: int) -> int:
        return 0

    async def read(
        self, stream: str, partition: int, offset: int, limit: int
    ) -> tuple[list[Batch], int]:
        self.reads += 1
        return [b for b in self.batches if b.base_offset >= offset], self.end


def batch_of(*ids: str) -> bytes:
    payloads = pa.array([b"x"] * len(ids), PAYLOAD_TYPE)
    return encode_record_batch(make_batch(payloads, ids=pa.array(ids, ID_TYPE)))


class Router1(NamedTuple):
    """router-1's `Partitions` over one fake storage node, a stream of its own and its lease."""

    stream: str
    storage: FakeStorage
    lease: Any
    partitions: Partitions


@contextlib.asynccontextmanager
async def router_1(etcd_client: aetcd.Client) -> AsyncIterator[Router1]:
    storage = FakeStorage()
    lease = await etcd_client.lease(30)
    partitions = Partitions(
        etcd_client,
        lambda: lease,
        "router-1",
        lambda s, p, ledgers: ("storage-1", storage),  # type: ignore[arg-type,return-value]
        claim_timeout_s=5.0,
    )
    try:
        yield Router1(f"reopen-{uuid.uuid4().hex[:8]}", storage, lease, partitions)
    finally:
        await partitions.close()
        await lease.revoke()


async def test_a_reopen_without_another_owner_keeps_the_window(etcd_client: aetcd.Client) -> None:
    async with router_1(etcd_client) as (stream, storage, lease, partitions):
        first = await partitions.get(stream, 0)
        assert (await first.append(batch_of("p:0", "p:1"), 2)).base_offset == 0
        window = first.dedup
        assert window is not None
        assert len(window) == 2
        # The next append is sequenced and recorded, then storage fails it.
        storage_append = storage.append

        async def failing(*args: Any) -> None:
            raise Unavailable("storage restarted")

        storage.append = failing  # type: ignore[method-assign,assignment]
        with contextlib.suppress(Unavailable):
            await first.append(batch_of("p:2", "p:3"), 2)
        storage.append = storage_append  # type: ignore[method-assign]
        assert len(window) == 4

        reads = storage.reads
        second = await partitions.get(stream, 0)
        assert second is not first
        assert second.epoch == first.epoch + 1
        assert second.dedup is window, "the window is kept"
        assert storage.reads == reads, "nothing read back from storage"
        assert len(window) == 2, "ids never stored are forgotten"
        retry = await second.append(batch_of("p:1", "p:2", "p:3"), 3)
        assert retry.offsets == [1, 2, 3]

        # Another router owns it for a while: the next claim rebuilds from storage.
        await second.close()
        second.failure = Unavailable("lost")
        await etcd_client.delete(f"{OWNERS}{stream}/0".encode())
        other = await claim_partition(etcd_client, lease, "router-2", stream, 0)
        await etcd_client.delete(f"{OWNERS}{stream}/0".encode())
        assert isinstance(other, Claim)
        assert other.epoch == second.epoch + 1
        third = await partitions.get(stream, 0)
        assert third.dedup is not window
        assert storage.reads > reads, "rebuilt from storage"
        assert third.dedup is not None
        assert len(third.dedup) == 4
        await third.close()


async def test_a_reopen_after_another_owner_and_a_failed_open_rebuilds_the_window(
    etcd_client: aetcd.Client,
) -> None:
    """This router's log fails; another router owns the partition for an epoch and
    stores ids; this router's next claim fails to open and is taken up again. That
    claim is the epoch right after one of this router's, yet the window of the failed
    log lacks the other router's ids: it must be rebuilt, or their retry is stored twice."""
    async with router_1(etcd_client) as (stream, storage, lease, partitions):
        first = await partitions.get(stream, 0)
        await first.append(batch_of("p:0", "p:1"), 2)
        first.failure = Unavailable("lost")
        # Another router's epoch: it stores "q:0" and goes.
        await etcd_client.delete(f"{OWNERS}{stream}/0".encode())
        other = await claim_partition(etcd_client, lease, "router-2", stream, 0)
        assert isinstance(other, Claim)
        storage.batches.append(Batch(storage.end, 1, 0, batch_of("q:0")))
        await etcd_client.delete(f"{OWNERS}{stream}/0".encode())
        # This router claims the next epoch, but its open fails once.
        storage_open = storage.open_partition

        async def failing(*args: Any) -> LogBounds:
            raise Unavailable("storage restarting")

        storage.open_partition = failing  # type: ignore[method-assign,assignment]
        with contextlib.suppress(Unavailable):
            await partitions.get(stream, 0)
        storage.open_partition = storage_open  # type: ignore[method-assign]

        second = await partitions.get(stream, 0)
        assert second.epoch == other.epoch + 1
        assert second.dedup is not first.dedup, "the window is rebuilt"
        retry = await second.append(batch_of("q:0"), 1)
        assert retry.offsets == [2], "the other router's id is known"
        assert storage.end == 3, "nothing stored twice"
        await second.close()
