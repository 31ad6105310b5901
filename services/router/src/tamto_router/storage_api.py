"""How a `StorageClient` reaches its storage node: the calls it makes, by RPC.

`StorageApi` is a storage node's API as the router calls it: each Storage RPC by
its name, its request message in, its response message out, failures raised as
`grpc.aio.AioRpcError` with the status the node answered (the client's one
error translation turns them into `TamtoError`s). Appends take the batches'
pieces rather than a request message: over gRPC they are written straight in
wire form.

`GrpcStorage` makes the calls over a channel, appends pipelined on one stream.
A process that runs a storage node beside its router may hand the router
another implementation for that node (`tamto_router.server.setup`'s
`local_storage`): one that calls the node's servicer in the same event loop,
with no serialisation and no socket, while every other node is called over
gRPC.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from tamto_protocol.pipelined import PipelinedCalls
from tamto_protocol.v1 import storage_pb2, storage_pb2_grpc
from tamto_protocol.wire import STORAGE_APPEND, STORAGE_APPEND_STREAM, storage_append_request

if TYPE_CHECKING:
    from typing_extensions import Buffer

#: One stored batch of an append: (base_offset, count, publish_time_us, arrow_ipc).
Piece = tuple[int, int, int, "Buffer"]


class StorageApi(Protocol):
    """A storage node's RPCs, as a `StorageClient` calls them (module docstring)."""

    async def call(self, method: str, request: Any, timeout_s: float) -> Any:
        """The response of the unary Storage RPC `method` (e.g. "OpenPartition")."""

    async def append(
        self, stream: str, partition: int, epoch: int, pieces: Sequence[Piece], timeout_s: float
    ) -> storage_pb2.StorageAppendResponse:
        """Storage `Append` of `pieces` to the partition, for `epoch`."""

    async def close(self) -> None:
        """End what the calls hold open (appends still waiting fail)."""


class GrpcStorage:
    """`StorageApi` over a gRPC channel: appends pipelined on one stream."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = storage_pb2_grpc.StorageStub(channel)
        self._append = PipelinedCalls(
            channel,
            STORAGE_APPEND_STREAM,
            storage_pb2.StorageAppendStreamResponse,
            fallback=(STORAGE_APPEND, storage_pb2.StorageAppendResponse),
        )

    async def call(self, method: str, request: Any, timeout_s: float) -> Any:
        return await getattr(self._stub, method)(request, timeout=timeout_s)

    async def append(
        self,
        stream: str,
        partition: int,
        epoch: int,
        pieces: Sequence[Piece],
        timeout_s: float,
    ) -> storage_pb2.StorageAppendResponse:
        def request(call_id: int) -> bytes:
            # In wire form: the batches' bytes are copied once, not twice.
            return storage_append_request(stream, partition, epoch, pieces, call_id)

        response: storage_pb2.StorageAppendResponse = await self._append(request, timeout=timeout_s)
        return response

    async def close(self) -> None:
        await self._append.close()
