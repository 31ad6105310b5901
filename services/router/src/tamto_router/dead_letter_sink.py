"""Appending dead letters to their stream, wherever its partition is owned.

The dead-letter stream is created (one partition) the first time a message
goes there. Its partition may be owned by this router, which appends locally,
or by another, which gets an ordinary Router.Append.
"""

from __future__ import annotations

import aetcd
import grpc

from tamto_common.channels import ChannelPool
from tamto_common.errors import Unavailable
from tamto_common.grpc_errors import downstream_error
from tamto_common.membership import MemberDirectory
from tamto_common.placement import Placement, PlacementView
from tamto_common.streams import StreamDef, stream_key
from tamto_protocol.v1 import messages_pb2, router_pb2, router_pb2_grpc
from tamto_router.partitions import Partitions

DEAD_LETTER_PARTITION = 0


class DeadLetterSink:
    def __init__(
        self,
        etcd: aetcd.Client,
        directory: MemberDirectory,
        channels: ChannelPool,
        partitions: Partitions,
        instance: str,
        placement: PlacementView | None = None,
    ) -> None:
        self._etcd = etcd
        #: Moved partitions and drained routers: the owner is the one gateways route to.
        self._placement = placement
        self._directory = directory
        self._channels = channels
        self._partitions = partitions
        self._instance = instance
        self._ensured: set[str] = set()

    async def _ensure_stream(self, name: str) -> None:
        if name in self._ensured:
            return
        key = stream_key(name)
        tx = self._etcd.transactions
        await self._etcd.transaction(
            compare=[tx.version(key) == 0],
            success=[tx.put(key, StreamDef(name=name, partitions=1).to_json())],
            failure=[],
        )
        self._ensured.add(name)

    async def publish(self, stream: str, arrow_ipc: bytes, count: int) -> None:
        """Durably append dead letters to `stream` (created if missing)."""
        await self._ensure_stream(stream)
        routers = {m.instance_id: m.address for m in self._directory.members("router")}
        if not routers:
            raise Unavailable("no router is registered for the dead-letter stream")
        decided = self._placement.current if self._placement is not None else Placement()
        owner = decided.owner(routers.keys(), stream, DEAD_LETTER_PARTITION)
        if owner == self._instance:
            log = await self._partitions.get(stream, DEAD_LETTER_PARTITION)
            await log.append(arrow_ipc, count)
            return
        stub = router_pb2_grpc.RouterStub(self._channels.get(routers[owner]))
        try:
            await stub.Append(
                router_pb2.RouterAppendRequest(
                    stream=stream,
                    partition=DEAD_LETTER_PARTITION,
                    batch=messages_pb2.RecordBatch(arrow_ipc=arrow_ipc, count=count),
                ),
                timeout=30,
            )
        except grpc.aio.AioRpcError as exc:
            raise downstream_error(exc, f"dead-letter append to {stream}") from exc
