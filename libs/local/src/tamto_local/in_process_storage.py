"""A storage node called in the router's own process: `StorageApi` without gRPC.

A co-located node (`tamto_local.node`) runs a router and a storage node in one
event loop. The router calls that storage node through `InProcessStorage`: each
request message goes to the node's `StorageServicer` method as it is, the
response comes back as it is, no serialisation and no socket between them (one
gRPC hop costs more CPU than the fsync of an append). Every other storage node is
still called over gRPC, and this one still serves gRPC to everyone else.

It answers as the gRPC path would: a failure is raised as the
`grpc.aio.AioRpcError` with the status and message the node's error translation
would have sent (`tamto_common.grpc_errors`), a call past its deadline as
DEADLINE_EXCEEDED, so the router's client translates both the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import grpc
import structlog

from tamto_common.grpc_errors import status_for, trailing_metadata_for
from tamto_protocol.pipelined import rpc_error
from tamto_protocol.v1 import messages_pb2, storage_pb2
from tamto_router.storage_api import Piece
from tamto_storage.grpc_api import StorageServicer

log = structlog.get_logger(__name__)

#: The servicer's unary methods take a context; called in-process none is used.
_NO_CONTEXT = cast(grpc.aio.ServicerContext, None)


class InProcessStorage:
    """`tamto_router.storage_api.StorageApi` of the storage node in this process.

    `servicer` is set once the node has built it (the router may be wired
    first); until then calls fail as UNAVAILABLE, as a node not yet up would.
    """

    def __init__(self, servicer: StorageServicer | None = None) -> None:
        self.servicer = servicer

    async def call(self, method: str, request: Any, timeout_s: float) -> Any:
        response = await self._answer(method, request, timeout_s)
        if method == "Read":  # the servicer writes its answer in wire form (`serve`)
            return storage_pb2.ReadResponse.FromString(response)
        return response

    async def append(
        self,
        stream: str,
        partition: int,
        epoch: int,
        pieces: Sequence[Piece],
        timeout_s: float,
    ) -> storage_pb2.StorageAppendResponse:
        request = storage_pb2.StorageAppendRequest(
            partition=storage_pb2.PartitionRef(stream=stream, partition=partition),
            epoch=epoch,
            batches=[
                messages_pb2.StoredBatch(
                    base_offset=base, count=count, publish_time_us=time_us, arrow_ipc=bytes(ipc)
                )
                for base, count, time_us, ipc in pieces
            ],
        )
        response: storage_pb2.StorageAppendResponse = await self._answer(
            "Append", request, timeout_s
        )
        return response

    async def close(self) -> None:
        """Nothing is held open between calls."""

    async def _answer(self, method: str, request: Any, timeout_s: float) -> Any:
        """The servicer's answer to `request`, its failure raised as gRPC would raise it."""
        servicer = self.servicer
        if servicer is None:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "the storage node is not serving yet")
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                return await getattr(servicer, method)(request, _NO_CONTEXT)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                raise rpc_error(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"{method}: no answer in {timeout_s} s"
                ) from None
            status = status_for(exc)
            if status is None:  # as the server's error translation answers it
                log.exception("unhandled error", method=f"in-process Storage/{method}")
                status = (grpc.StatusCode.INTERNAL, "internal error")
            raise rpc_error(*status, trailing_metadata_for(exc)) from exc
