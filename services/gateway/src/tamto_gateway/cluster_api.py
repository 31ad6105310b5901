"""The Gateway's cluster placement RPCs: move a partition, drain or undrain a router.

A gRPC adapter module: it authorizes (admin on `*`: these change where every
stream's partitions live), turns the request into a call of
`tamto_common.placement` (the one place placement decisions are made and
validated) and audits the change. Errors are `TamtoError`s, translated to gRPC
statuses in one place like every other call's.
"""

from __future__ import annotations

import aetcd
import grpc

from tamto_common.errors import InvalidArgument, Unavailable
from tamto_common.placement import move_partition, set_drained
from tamto_gateway.guarded import Guarded
from tamto_protocol.v1 import gateway_pb2

#: The router id that means "back to the ring's choice" (`tamto partition move --to ring`).
RING = "ring"


class ClusterApi(Guarded):
    """Mixed into the Gateway servicer: MovePartition and DrainNode."""

    #: Set by the gateway's setup: where placement decisions are stored.
    placement_etcd: aetcd.Client | None = None

    def _etcd(self) -> aetcd.Client:
        if self.placement_etcd is None:
            raise Unavailable("this gateway does not manage placement")
        return self.placement_etcd

    async def MovePartition(
        self, request: gateway_pb2.MovePartitionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.MovePartitionResponse:
        principal = await self._security_admin(context, "MovePartition")
        if not request.stream:
            raise InvalidArgument("stream is required")
        target = None if request.router in ("", RING) else request.router
        owner = await move_partition(self._etcd(), request.stream, request.partition, target)
        await self._audit_admin(
            context,
            principal,
            "partition.move",
            f"partition {request.stream}/{request.partition} to {target or RING}",
        )
        return gateway_pb2.MovePartitionResponse(
            stream=request.stream, partition=request.partition, router=owner
        )

    async def DrainNode(
        self, request: gateway_pb2.DrainNodeRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.DrainNodeResponse:
        principal = await self._security_admin(context, "DrainNode")
        if not request.node:
            raise InvalidArgument("node is required")
        drained = await set_drained(self._etcd(), request.node, not request.undrain)
        await self._audit_admin(
            context,
            principal,
            "node.undrain" if request.undrain else "node.drain",
            f"router {request.node}",
        )
        return gateway_pb2.DrainNodeResponse(
            node=request.node, drained=not request.undrain, drained_nodes=drained
        )
