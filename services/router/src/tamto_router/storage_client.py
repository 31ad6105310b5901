"""The router's adapter to the storage service: the only module that builds
storage protobufs. Failures come back as TamtoError subclasses.

The calls go through a `StorageApi` (`tamto_router.storage_api`): over gRPC by
default, or in the same process for a storage node run beside the router."""

from __future__ import annotations

from typing import Any

import grpc

from tamto_common.grpc_errors import downstream_error
from tamto_protocol.v1 import messages_pb2, storage_pb2
from tamto_router.acks import AckSet
from tamto_router.batch_cache import BatchCache
from tamto_router.model import Batch, DiskUsage, LogBounds
from tamto_router.storage_api import GrpcStorage, StorageApi
from tamto_router.stored_batch_proto import batch_from_proto, batch_to_proto

#: Most Arrow bytes one read returns from the cache (storage's own default cap).
CACHE_READ_MAX_BYTES = 8 * 1024 * 1024


class StorageClient:
    """Calls one storage node for partitions of streams.

    With a `BatchCache`, batches this client appended or read are remembered,
    and reads are served from memory when the cache holds the offset asked for.
    `api`: how the node is called (default: gRPC over `channel`).
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        timeout_s: float = 30.0,
        cache: BatchCache | None = None,
        api: StorageApi | None = None,
    ) -> None:
        self.channel = channel
        self._api: StorageApi = GrpcStorage(channel) if api is None else api
        self._timeout = timeout_s
        self._cache = cache

    async def close(self) -> None:
        """End the append stream (appends still waiting fail)."""
        await self._api.close()

    async def _call(self, method: str, request: Any, what: str) -> Any:
        """One unary call of Storage RPC `method`; a gRPC failure becomes the matching
        TamtoError."""
        try:
            return await self._api.call(method, request, self._timeout)
        except grpc.aio.AioRpcError as exc:
            raise downstream_error(exc, f"storage {what}") from exc

    @staticmethod
    def _ref(stream: str, partition: int) -> storage_pb2.PartitionRef:
        return storage_pb2.PartitionRef(stream=stream, partition=partition)

    async def open_partition(
        self, stream: str, partition: int, epoch: int, start_at: int = 0
    ) -> LogBounds:
        """Claim the partition on this node for `epoch`; its bounds. `start_at` > 0: an
        empty partition starts there instead of 0 (re-replication of a partition whose
        start moved past 0; FailedPrecondition if it holds entries)."""
        if self._cache is not None:
            # Another owner may have written since: only what is read or appended from
            # now on is known to be what storage holds.
            self._cache.drop((stream, partition))
        r = await self._call(
            "OpenPartition",
            storage_pb2.OpenPartitionRequest(
                partition=self._ref(stream, partition), epoch=epoch, start_at=start_at
            ),
            f"open {stream}/{partition}",
        )
        return LogBounds(r.start_offset, r.next_offset)

    async def fence_ledger(self, stream: str, partition: int, epoch: int) -> int:
        """Fence the partition's ledger on this node for `epoch` (appends of older
        epochs are refused from now on); the last offset it has on disk (-1: none)."""
        if self._cache is not None:
            self._cache.drop((stream, partition))
        r = await self._call(
            "FenceLedger",
            storage_pb2.FenceLedgerRequest(partition=self._ref(stream, partition), epoch=epoch),
            f"fence {stream}/{partition}",
        )
        return int(r.last_offset)

    async def truncate(
        self,
        stream: str,
        partition: int,
        epoch: int,
        next_offset: int,
        *,
        drop_sealed: bool = False,
    ) -> int:
        """Drop this node's entries of the partition from `next_offset` on (entries older
        owners wrote past a recovered ledger's end); the node's end afterwards.
        `drop_sealed`: sealed ones too (local segments are cut where they hold them)."""
        r = await self._call(
            "TruncatePartition",
            storage_pb2.TruncatePartitionRequest(
                partition=self._ref(stream, partition),
                epoch=epoch,
                next_offset=next_offset,
                drop_sealed=drop_sealed,
            ),
            f"truncate {stream}/{partition}",
        )
        return int(r.next_offset)

    async def repair_range(
        self, stream: str, partition: int, epoch: int, first: int, batches: list[Batch]
    ) -> str:
        """Replace this node's damaged range starting at `first` by `batches`, read from
        a healthy replica (Storage `RepairRange`); the damaged file, now kept aside."""
        r = await self._call(
            "RepairRange",
            storage_pb2.RepairRangeRequest(
                partition=self._ref(stream, partition),
                epoch=epoch,
                first_offset=first,
                batches=[batch_to_proto(b) for b in batches],
            ),
            f"repair {stream}/{partition}",
        )
        return str(r.damaged_file)

    def forget_cached(self, stream: str, partition: int) -> None:
        """Drop what the cache holds of a partition (storage changed what it stores)."""
        if self._cache is not None:
            self._cache.drop((stream, partition))

    async def current_start(self, stream: str, partition: int, epoch: int) -> int:
        """The partition's start as storage holds it now (retention moves it).

        OpenPartition again with the owner's own epoch claims nothing new: it only
        reports the offsets. Cached batches below the start are dropped (retention
        removed them); holes interest retention leaves above it come with a bus
        event, which drops the partition's whole cache (`forget_cached`).
        """
        r = await self._call(
            "OpenPartition",
            storage_pb2.OpenPartitionRequest(partition=self._ref(stream, partition), epoch=epoch),
            f"offsets of {stream}/{partition}",
        )
        start = int(r.start_offset)
        if self._cache is not None:
            self._cache.drop_below((stream, partition), start)
        return start

    async def append(self, stream: str, partition: int, epoch: int, batches: list[Batch]) -> int:
        pieces = [(b.base_offset, b.count, b.publish_time_us, b.arrow_ipc) for b in batches]
        try:
            r = await self._api.append(stream, partition, epoch, pieces, self._timeout)
        except grpc.aio.AioRpcError as exc:
            raise downstream_error(exc, f"storage append {stream}/{partition}") from exc
        if self._cache is not None:
            self._cache.add((stream, partition), batches)
        return int(r.next_offset)

    async def read(
        self,
        stream: str,
        partition: int,
        from_offset: int,
        max_messages: int,
        from_cache: bool = True,
    ) -> tuple[list[Batch], int]:
        """Batches from the one holding `from_offset` on (the first may start before it),
        and the offset the next read starts at. Fewer than `max_messages` may come.
        `from_cache=False` asks this node even when the cache (shared by every node's
        client) holds the offset: what this node holds, not what the partition holds
        (so it is not cached either)."""
        if self._cache is not None and from_cache:
            cached = self._cache.get(
                (stream, partition), from_offset, max_messages, CACHE_READ_MAX_BYTES
            )
            if cached:
                return cached, cached[-1].end
        r = await self._call(
            "Read",
            storage_pb2.ReadRequest(
                partition=self._ref(stream, partition),
                from_offset=from_offset,
                max_messages=max_messages,
            ),
            f"read {stream}/{partition}",
        )
        batches = [batch_from_proto(b) for b in r.batches]
        if self._cache is not None and from_cache:  # not one node's view: it may differ
            self._cache.add((stream, partition), batches, read=True)
        return batches, int(r.next_offset)

    async def offset_for_time(self, stream: str, partition: int, time_us: int) -> int:
        r = await self._call(
            "OffsetForTime",
            storage_pb2.OffsetForTimeRequest(
                partition=self._ref(stream, partition), time_us=time_us
            ),
            f"offset for time {stream}/{partition}",
        )
        return int(r.offset)

    async def get_cursor(self, stream: str, partition: int, subscription: str) -> AckSet | None:
        r = await self._call(
            "GetCursor",
            storage_pb2.GetCursorRequest(
                partition=self._ref(stream, partition), subscription=subscription
            ),
            f"cursor {stream}/{partition}",
        )
        if not r.exists:
            return None
        return AckSet(
            r.ack_floor,
            [(x.first, x.last) for x in r.acked_above_floor],
            r.redeliveries,
            r.dead_lettered,
        )

    async def commit_cursor(
        self,
        stream: str,
        partition: int,
        subscription: str,
        epoch: int,
        acks: AckSet,
        replace: bool = False,
    ) -> None:
        """Add `acks` to the stored cursor, or with `replace` (a seek) store exactly them."""
        await self._call(
            "CommitCursor",
            storage_pb2.CommitCursorRequest(
                partition=self._ref(stream, partition),
                subscription=subscription,
                epoch=epoch,
                ack_floor=acks.floor,
                acked_above_floor=[
                    messages_pb2.OffsetRange(first=a, last=b) for a, b in acks.ranges
                ],
                replace=replace,
                redeliveries=acks.redeliveries,
                dead_lettered=acks.dead_lettered,
            ),
            f"commit cursor {stream}/{partition}",
        )

    async def list_cursors(self, stream: str, partition: int) -> list[str]:
        """The names of the partition's stored cursors, sorted."""
        r = await self._call(
            "ListCursors",
            storage_pb2.ListCursorsRequest(partition=self._ref(stream, partition)),
            f"list cursors {stream}/{partition}",
        )
        return list(r.subscriptions)

    async def delete_cursor(
        self, stream: str, partition: int, subscription: str, epoch: int
    ) -> bool:
        r = await self._call(
            "DeleteCursor",
            storage_pb2.DeleteCursorRequest(
                partition=self._ref(stream, partition), subscription=subscription, epoch=epoch
            ),
            f"delete cursor {stream}/{partition}",
        )
        return bool(r.deleted)

    async def disk_usage(self, stream: str, partition: int) -> DiskUsage:
        r = await self._call(
            "PartitionStats",
            storage_pb2.PartitionStatsRequest(partition=self._ref(stream, partition)),
            f"stats of {stream}/{partition}",
        )
        return DiskUsage(
            LogBounds(r.start_offset, r.next_offset), int(r.wal_bytes), int(r.segment_bytes)
        )
