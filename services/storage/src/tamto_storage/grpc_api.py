"""The Storage gRPC service: the only module that sees protobuf types.

Requests become domain calls on the `PartitionStore`; domain results become
responses (Read's written straight in wire form by `read_response`, so `serve`
registers it with a pass-through serializer). Errors are raised as
`TamtoError`s and turned into statuses by `TranslateErrorsInterceptor`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import grpc

from tamto_common.audit import AuditLog
from tamto_common.errors import InvalidArgument
from tamto_common.lists import check_count
from tamto_common.pipelined import answer_calls
from tamto_protocol.limits import MAX_CURSOR_RANGES
from tamto_protocol.v1 import messages_pb2, storage_pb2, storage_pb2_grpc
from tamto_protocol.wire import STORAGE_APPEND, int_field, stored_batch_field
from tamto_storage.model import Cursor, OffsetRange, StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.replica_repair import install_copy
from tamto_storage.sealed_truncate import truncate_sealed
from tamto_storage.space import refusing_when_full
from tamto_storage.store import PartitionStore

if TYPE_CHECKING:
    from typing_extensions import Buffer


class _PartitionRequest(Protocol):
    """Every Storage request names its partition in a `partition` field."""

    @property
    def partition(self) -> storage_pb2.PartitionRef: ...

    def HasField(self, field_name: Literal["partition"]) -> bool: ...


class StorageServicer(storage_pb2_grpc.StorageServicer):
    """Serves partitions of one `PartitionStore`."""

    def __init__(
        self, store: PartitionStore, read_max_bytes: int, audit: AuditLog | None = None
    ) -> None:
        """`audit`: where repairs from a healthy replica are recorded (None: nowhere)."""
        self._store = store
        self._read_max_bytes = read_max_bytes
        self._audit = audit

    async def _partition(self, request: _PartitionRequest) -> Partition:
        if not request.HasField("partition"):
            raise InvalidArgument("partition is required")
        ref = request.partition
        return await self._store.get(ref.stream, ref.partition)

    async def OpenPartition(
        self, request: storage_pb2.OpenPartitionRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.OpenPartitionResponse:
        partition = await self._partition(request)
        if request.start_at < 0:
            raise InvalidArgument(f"start_at must not be negative, got {request.start_at}")
        with refusing_when_full():
            offsets = await partition.open(request.epoch)
            if request.start_at > 0:
                ref = request.partition
                offsets = await self._store.start_partition_at(
                    ref.stream, ref.partition, request.epoch, request.start_at
                )
        return storage_pb2.OpenPartitionResponse(
            next_offset=offsets.next_offset, start_offset=offsets.start_offset
        )

    async def FenceLedger(
        self, request: storage_pb2.FenceLedgerRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.FenceLedgerResponse:
        partition = await self._partition(request)
        with refusing_when_full():
            last_offset = await partition.fence(request.epoch)
        return storage_pb2.FenceLedgerResponse(last_offset=last_offset)

    async def TruncatePartition(
        self, request: storage_pb2.TruncatePartitionRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.TruncatePartitionResponse:
        partition = await self._partition(request)
        if request.drop_sealed:
            next_offset = await truncate_sealed(
                self._store, partition, request.epoch, request.next_offset
            )
        else:
            next_offset = await partition.truncate(request.epoch, request.next_offset)
        return storage_pb2.TruncatePartitionResponse(next_offset=next_offset)

    async def RepairRange(
        self, request: storage_pb2.RepairRangeRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.RepairRangeResponse:
        partition = await self._partition(request)
        batches = [
            StoredBatch(b.base_offset, b.count, b.publish_time_us, b.arrow_ipc)
            for b in request.batches
        ]
        with refusing_when_full():
            installed = await install_copy(
                self._store, partition, request.epoch, request.first_offset, batches, self._audit
            )
        return storage_pb2.RepairRangeResponse(
            damaged_file=str(installed.damaged_file), next_offset=installed.next_offset
        )

    async def Append(
        self, request: storage_pb2.StorageAppendRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.StorageAppendResponse:
        return await self._append(request)

    async def AppendStream(
        self,
        request_iterator: AsyncIterator[storage_pb2.StorageAppendRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[storage_pb2.StorageAppendStreamResponse]:
        """Append calls pipelined on one stream (`tamto_common.pipelined`)."""
        async for answer in answer_calls(
            request_iterator,
            self._append,
            storage_pb2.StorageAppendStreamResponse,
            STORAGE_APPEND,
        ):
            yield answer

    async def _append(
        self, request: storage_pb2.StorageAppendRequest
    ) -> storage_pb2.StorageAppendResponse:
        partition = await self._partition(request)
        batches = [
            StoredBatch(b.base_offset, b.count, b.publish_time_us, b.arrow_ipc)
            for b in request.batches
        ]
        with refusing_when_full():
            next_offset = await partition.append(request.epoch, batches)
        return storage_pb2.StorageAppendResponse(next_offset=next_offset)

    async def Read(  # type: ignore[override]  # the response already encoded: see `serve`
        self, request: storage_pb2.ReadRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        """The `ReadResponse`, already encoded: register with `serve`."""
        partition = await self._partition(request)
        result = await partition.read(
            request.from_offset, request.max_messages, self._read_max_bytes
        )
        return read_response(result.batches, result.next_offset)

    async def OffsetForTime(
        self, request: storage_pb2.OffsetForTimeRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.OffsetForTimeResponse:
        partition = await self._partition(request)
        offset = await partition.offset_for_time(request.time_us)
        return storage_pb2.OffsetForTimeResponse(offset=offset)

    async def CommitCursor(
        self, request: storage_pb2.CommitCursorRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.CommitCursorResponse:
        check_count("acked_above_floor", len(request.acked_above_floor), MAX_CURSOR_RANGES)
        partition = await self._partition(request)
        cursor = Cursor(
            request.ack_floor,
            _ranges(request.acked_above_floor),
            request.redeliveries,
            request.dead_lettered,
        )
        with refusing_when_full():
            await partition.commit_cursor(
                request.epoch, request.subscription, cursor, request.replace
            )
        return storage_pb2.CommitCursorResponse()

    async def ListCursors(
        self, request: storage_pb2.ListCursorsRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.ListCursorsResponse:
        partition = await self._partition(request)
        return storage_pb2.ListCursorsResponse(subscriptions=await partition.cursor_names())

    async def DeleteCursor(
        self, request: storage_pb2.DeleteCursorRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.DeleteCursorResponse:
        partition = await self._partition(request)
        deleted = await partition.delete_cursor(request.epoch, request.subscription)
        return storage_pb2.DeleteCursorResponse(deleted=deleted)

    async def PartitionStats(
        self, request: storage_pb2.PartitionStatsRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.PartitionStatsResponse:
        partition = await self._partition(request)
        offsets = partition.offsets()
        wal_bytes, segment_bytes = await partition.disk_bytes()
        return storage_pb2.PartitionStatsResponse(
            start_offset=offsets.start_offset,
            next_offset=offsets.next_offset,
            wal_bytes=wal_bytes,
            segment_bytes=segment_bytes,
        )

    async def GetCursor(
        self, request: storage_pb2.GetCursorRequest, context: grpc.aio.ServicerContext
    ) -> storage_pb2.GetCursorResponse:
        partition = await self._partition(request)
        cursor = await partition.get_cursor(request.subscription)
        if cursor is None:
            return storage_pb2.GetCursorResponse(exists=False)
        return storage_pb2.GetCursorResponse(
            exists=True,
            ack_floor=cursor.ack_floor,
            acked_above_floor=[
                messages_pb2.OffsetRange(first=r.first, last=r.last)
                for r in cursor.acked_above_floor
            ],
            redeliveries=cursor.redeliveries,
            dead_lettered=cursor.dead_lettered,
        )


def serve(servicer: StorageServicer, server: grpc.aio.Server) -> None:
    """Register the Storage RPCs; Read sends its response already encoded."""
    storage_pb2_grpc.add_StorageServicer_to_server(servicer, server)
    # Registered after the generated handlers, this one takes Read over.
    read = grpc.unary_unary_rpc_method_handler(
        servicer.Read,
        request_deserializer=storage_pb2.ReadRequest.FromString,
        response_serializer=None,
    )
    server.add_registered_method_handlers("tamto.v1.Storage", {"Read": read})


def read_response(batches: Sequence[StoredBatch], next_offset: int) -> bytes:
    """`tamto.v1.ReadResponse` {batches = 1: `StoredBatch` {base_offset = 1, count = 2,
    publish_time_us = 3, arrow_ipc = 4}, next_offset = 2}, byte for byte what
    `SerializeToString` writes, in one join.

    Up to 8 MiB of Arrow bytes per read: building the message copies them once
    and serialising it once more, and both were most of storage's time per read.
    """
    pieces: list[Buffer] = []
    for b in batches:
        pieces += stored_batch_field(1, b.base_offset, b.count, b.publish_time_us, b.arrow_ipc)
    pieces.append(int_field(2, next_offset))
    return b"".join(pieces)


def _ranges(ranges: Iterable[messages_pb2.OffsetRange]) -> tuple[OffsetRange, ...]:
    return tuple(OffsetRange(r.first, r.last) for r in ranges)
