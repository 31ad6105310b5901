"""The gateway's adapters to routers and the auth service: the only place that
builds their protobufs. Failures come back as TamtoError subclasses."""

from __future__ import annotations

import grpc

from tamto_common.channels import ChannelPool
from tamto_common.grpc_errors import downstream_error
from tamto_gateway.routing import Routes
from tamto_protocol.v1 import auth_pb2, auth_pb2_grpc, messages_pb2, router_pb2, router_pb2_grpc


class Upstream:
    def __init__(self, routes: Routes, channels: ChannelPool, timeout_s: float) -> None:
        self.routes = routes
        self._channels = channels
        self._timeout = timeout_s

    async def append(
        self, stream: str, partition: int, arrow_ipc: bytes, count: int
    ) -> tuple[int, list[int]]:
        """Append through the owning router: (base offset, per-message offsets if deduped)."""
        address = await self.routes.router_for(stream, partition)
        stub = router_pb2_grpc.RouterStub(self._channels.get(address))
        try:
            response = await stub.Append(
                router_pb2.RouterAppendRequest(
                    stream=stream,
                    partition=partition,
                    batch=messages_pb2.RecordBatch(arrow_ipc=arrow_ipc, count=count),
                ),
                timeout=self._timeout,
            )
        except grpc.aio.AioRpcError as exc:
            raise downstream_error(exc, f"router {address}") from exc
        return int(response.base_offset), list(response.offsets)

    def router_consume(self, address: str) -> grpc.aio.StreamStreamCall:
        """Open a consume stream to one router (the caller writes subscribe first)."""
        return router_pb2_grpc.RouterStub(self._channels.get(address)).Consume()

    async def authenticate(self, api_key: str) -> tuple[str, int]:
        stub = auth_pb2_grpc.AuthStub(self._channels.get(await self.routes.auth_address()))
        try:
            r = await stub.Authenticate(
                auth_pb2.AuthRequest(api_key=api_key), timeout=self._timeout
            )
        except grpc.aio.AioRpcError as exc:
            raise downstream_error(exc, "auth") from exc
        return r.token, int(r.expires_at_unix)

    async def jwks(self) -> str:
        stub = auth_pb2_grpc.AuthStub(self._channels.get(await self.routes.auth_address()))
        try:
            r = await stub.GetJwks(auth_pb2.GetJwksRequest(), timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            raise downstream_error(exc, "auth") from exc
        return str(r.jwks_json)
