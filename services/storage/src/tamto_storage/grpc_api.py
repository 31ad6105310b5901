"""The Storage gRPC service: the only module that sees protobuf types.

Requests become domain calls on the `PartitionStore`; domain results become
responses. Errors are raised as `TamtoError`s and turned into statuses by
`TranslateErrorsInterceptor`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from tamto_common.errors import InvalidArgument
from tamto_protocol.v1 import messages_pb2, storage_pb2, storage_pb2_grpc
from tamto_storage.model import Cursor, OffsetRange, StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.store import PartitionStore


class StorageServicer(storage_pb2_grpc.StorageServicer):  # type: ignore[misc]
    """Serves partitions of one `PartitionStore`."""

    def __init__(self, store: PartitionStore, read_max_bytes: int) -> None:
        self._store = store
        self._read_max_bytes = read_max_bytes

    async def _partition(self, request: Any) -> Partition:
        if not request.HasField("partition"):
            raise InvalidArgument("partition is required")
        ref = request.partition
        return await self._store.get(ref.stream, ref.partition)

    async def OpenPartition(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        partition = await self._partition(request)
        offsets = await partition.open(request.epoch)
        return storage_pb2.OpenPartitionResponse(
            next_offset=offsets.next_offset, start_offset=offsets.start_offset
        )

    async def Append(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        partition = await self._partition(request)
        batches = [
            StoredBatch(b.base_offset, b.count, b.publish_time_us, b.arrow_ipc)
            for b in request.batches
        ]
        next_offset = await partition.append(request.epoch, batches)
        return storage_pb2.StorageAppendResponse(next_offset=next_offset)

    async def Read(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        partition = await self._partition(request)
        result = await partition.read(
            request.from_offset, request.max_messages, self._read_max_bytes
        )
        return storage_pb2.ReadResponse(
            batches=[
                messages_pb2.StoredBatch(
                    base_offset=b.base_offset,
                    count=b.count,
                    publish_time_us=b.publish_time_us,
                    arrow_ipc=b.arrow_ipc,
                )
                for b in result.batches
            ],
            next_offset=result.next_offset,
        )

    async def OffsetForTime(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        partition = await self._partition(request)
        offset = await partition.offset_for_time(request.time_us)
        return storage_pb2.OffsetForTimeResponse(offset=offset)

    async def CommitCursor(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        partition = await self._partition(request)
        cursor = Cursor(request.ack_floor, _ranges(request.acked_above_floor))
        await partition.commit_cursor(request.epoch, request.subscription, cursor)
        return storage_pb2.CommitCursorResponse()

    async def GetCursor(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
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
        )


def _ranges(ranges: Iterable[Any]) -> tuple[OffsetRange, ...]:
    return tuple(OffsetRange(r.first, r.last) for r in ranges)
