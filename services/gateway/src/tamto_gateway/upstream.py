"""The gateway's adapters to routers and the auth service: the only place that
builds their protobufs. Failures come back as TamtoError subclasses."""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeAlias

import grpc
import structlog
from prometheus_client import Histogram

from tamto_common.channels import ChannelPool
from tamto_common.errors import TamtoError
from tamto_common.grpc_errors import downstream_error, error_for
from tamto_common.message_traces import message_span
from tamto_gateway.consume_follow import ConsumeFollower
from tamto_gateway.consume_mux import Muxes, MuxSession
from tamto_gateway.routing import Routes
from tamto_protocol.pipelined import PipelinedCalls
from tamto_protocol.v1 import auth_pb2, auth_pb2_grpc, messages_pb2, router_pb2, router_pb2_grpc
from tamto_protocol.wire import (
    ROUTER_APPEND,
    ROUTER_APPEND_STREAM,
    Order,
    router_append_request,
)

PUBLISH_ACK_SECONDS = Histogram(
    "tamto_gateway_publish_ack_seconds",
    "From a publish reaching the gateway to its ack (durable on the partition's quorum), "
    "one observation per batch, every API (gRPC, HTTP, MQTT) and pipelined calls included",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)

log = structlog.get_logger(__name__)

ROUTER_CONSUME = "/tamto.v1.Router/Consume"

#: A router's own answers about a request: passed on as they are. Other failures
#: (the router unreachable, failing) name the partition, never the router's
#: internal address, which is for the gateway's log.
_ROUTER_ANSWERS = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)


def router_error(exc: grpc.aio.AioRpcError, stream: str, partition: int) -> TamtoError:
    """A failed call to the router owning `stream`/`partition`, for the client."""
    code = exc.code()
    if code in _ROUTER_ANSWERS:
        return error_for(code, exc.details() or code.name)
    return downstream_error(exc, f"the router of {stream}/{partition}")


#: A consume session with one router: on the router's mux, or a call of its own.
RouterConsume: TypeAlias = MuxSession | grpc.aio.StreamStreamCall


class Upstream:
    def __init__(
        self, routes: Routes, channels: ChannelPool, timeout_s: float, consume_setups: int = 16
    ) -> None:
        self.routes = routes
        self._channels = channels
        self._timeout = timeout_s
        #: Per router address: its channel and the appends pipelined on one stream.
        self._appends: dict[str, tuple[grpc.aio.Channel, PipelinedCalls]] = {}
        self._consume_setups = consume_setups
        self._setups: dict[str, asyncio.Semaphore] = {}
        #: Per router address: the one stream carrying this gateway's consume sessions.
        self.muxes = Muxes(timeout_s)
        #: Keeps consume sessions on their partitions' owners (entered by the server).
        self.follower = ConsumeFollower(routes, self.muxes)

    async def append(
        self, stream: str, partition: int, arrow_ipc: bytes, count: int, order: Order | None = None
    ) -> tuple[int, list[int]]:
        """Append through the owning router: (base offset, per-message offsets if deduped)."""
        started = time.perf_counter()
        address = await self.routes.router_for(stream, partition)
        channel = self._channels.get(address)
        known = self._appends.get(address)
        if known is None or known[0] is not channel:
            appends = PipelinedCalls(
                channel,
                ROUTER_APPEND_STREAM,
                router_pb2.RouterAppendStreamResponse,
                fallback=(ROUTER_APPEND, router_pb2.RouterAppendResponse),
            )
            known = self._appends[address] = (channel, appends)

        def request(call_id: int) -> bytes:
            # In wire form: the batch's bytes are copied once, not twice.
            return router_append_request(stream, partition, arrow_ipc, count, call_id, order)

        try:
            with message_span(
                "tamto.gateway", "tamto.gateway.publish", [arrow_ipc], stream, partition
            ):
                response = await known[1](request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            log.info("router append failed", router=address, code=exc.code().name)
            raise router_error(exc, stream, partition) from exc
        PUBLISH_ACK_SECONDS.observe(time.perf_counter() - started)
        return int(response.base_offset), list(response.offsets)

    async def close(self) -> None:
        """End the append and consume streams to the routers (appends still waiting
        fail, consume sessions end UNAVAILABLE)."""
        for _channel, appends in self._appends.values():
            await appends.close()
        self._appends.clear()
        await self.muxes.close()

    def consume_setups(self, address: str) -> asyncio.Semaphore:
        """Held while a consume session opens or cancels its stream to router `address`.

        At most `consume_setups` sessions do so at once per router: a crowd of
        consumers attaching (or leaving) at once queues here instead of filling the
        event loop with thousands of gRPC call setups, so publishes keep their
        latency, and the crowd attaches at the rate the loop can spare.
        Per router, so a router that is slow to answer delays no other router's.
        On a router's consume mux opening or leaving a session is one message
        (`tamto_gateway.consume_mux`); the bound matters for routers without one.
        """
        gate = self._setups.get(address)
        if gate is None:
            gate = self._setups[address] = asyncio.Semaphore(self._consume_setups)
        return gate

    async def router_consume(self, address: str) -> RouterConsume:
        """Open a consume session with one router (the caller writes subscribe first):
        a session on the gateway's one `ConsumeMux` stream to that router, or, for a
        router without it, a `Consume` stream of its own (`tamto_gateway.consume_mux`).

        Its responses come as the router encoded them (`ConsumeResponse` bytes): the
        gateway forwards deliveries without parsing them.
        """
        channel = self._channels.get(address)
        mux = await self.muxes.get(address, channel)
        if mux is not None:
            return mux.session()
        consume = channel.stream_stream(
            ROUTER_CONSUME,
            request_serializer=messages_pb2.ConsumeRequest.SerializeToString,
            response_deserializer=None,
        )
        call: grpc.aio.StreamStreamCall = consume()
        return call

    # -- subscription administration, stream stats, peek (one partition each) ----

    async def _router_call(self, stream: str, partition: int, method: str, request: Any) -> Any:
        """One unary call to the router owning the partition."""
        address = await self.routes.router_for(stream, partition)
        stub = router_pb2_grpc.RouterStub(self._channels.get(address))
        try:
            return await getattr(stub, method)(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            log.info("router call failed", router=address, method=method, code=exc.code().name)
            raise router_error(exc, stream, partition) from exc

    async def list_subscriptions(self, stream: str, partition: int) -> list[str]:
        request = router_pb2.RouterPartitionRequest(stream=stream, partition=partition)
        r = await self._router_call(stream, partition, "ListSubscriptions", request)
        return list(r.subscriptions)

    async def describe_subscription(
        self, stream: str, partition: int, subscription: str
    ) -> messages_pb2.SubscriptionPartition:
        request = router_pb2.RouterSubscriptionRequest(
            stream=stream, partition=partition, subscription=subscription
        )
        r: messages_pb2.SubscriptionPartition = await self._router_call(
            stream, partition, "DescribeSubscription", request
        )
        return r

    async def seek_subscription(
        self,
        stream: str,
        partition: int,
        subscription: str,
        target: messages_pb2.SeekTarget,
        dry_run: bool = False,
    ) -> messages_pb2.SubscriptionPartition:
        request = router_pb2.RouterSeekRequest(
            stream=stream,
            partition=partition,
            subscription=subscription,
            target=target,
            dry_run=dry_run,
        )
        r: messages_pb2.SubscriptionPartition = await self._router_call(
            stream, partition, "SeekSubscription", request
        )
        return r

    async def delete_subscription(self, stream: str, partition: int, subscription: str) -> bool:
        request = router_pb2.RouterSubscriptionRequest(
            stream=stream, partition=partition, subscription=subscription
        )
        r = await self._router_call(stream, partition, "DeleteSubscription", request)
        return bool(r.deleted)

    async def partition_stats(self, stream: str, partition: int) -> messages_pb2.PartitionStats:
        request = router_pb2.RouterPartitionRequest(stream=stream, partition=partition)
        r: messages_pb2.PartitionStats = await self._router_call(
            stream, partition, "GetPartitionStats", request
        )
        return r

    async def read(
        self, stream: str, partition: int, offset: int, count: int, subscription: str = ""
    ) -> list[messages_pb2.StoredBatch]:
        """Stored batches holding [offset, offset + count) (whole: they may start before),
        or with `subscription` the next `count` it has not acked (cut to exactly them)."""
        request = router_pb2.RouterReadRequest(
            stream=stream,
            partition=partition,
            from_offset=offset,
            max_messages=count,
            subscription=subscription,
        )
        r = await self._router_call(stream, partition, "Read", request)
        return list(r.batches)

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
