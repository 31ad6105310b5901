"""The public Gateway API: authenticate, validate, route. Protobuf stays here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc

from tamto_common.audit import LOGIN
from tamto_common.errors import FailedPrecondition, InvalidArgument, TamtoError
from tamto_common.guard import Guard
from tamto_common.names import check_name
from tamto_common.pipelined import answer_calls
from tamto_common.policy import Permission
from tamto_common.publishing import check_publish
from tamto_common.subscribe import (
    check_consumer_id,
    check_consumer_name,
    check_partitions,
    check_start_time_us,
)
from tamto_common.tokens import Principal
from tamto_gateway.cluster_api import ClusterApi
from tamto_gateway.consume import REFUSED_END_WAIT_S, FanOut, SetupStep
from tamto_gateway.ephemeral import EphemeralHub
from tamto_gateway.ephemeral_api import EphemeralApi
from tamto_gateway.functions_api import FunctionsApi
from tamto_gateway.limits import ConsumersPerConnection
from tamto_gateway.requests import RequestBroker
from tamto_gateway.security_api import AuthForwarder, SecurityApi
from tamto_gateway.stream_proto import stream_def, stream_info
from tamto_gateway.streams import StreamRegistry
from tamto_gateway.subscriptions_api import SubscriptionsApi
from tamto_gateway.upstream import Upstream
from tamto_protocol.delivery_wire import consume_error, raw_responses
from tamto_protocol.v1 import auth_pb2, gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_protocol.wire import PUBLISH, order_of

#: Longest a consume stream waits for its client's subscribe within its setup turn.
SUBSCRIBE_IN_TURN_S = 0.2


class GatewayServicer(  # type: ignore[misc]  # SubscribeEphemeral answers encoded bytes
    SecurityApi,
    ClusterApi,
    EphemeralApi,
    SubscriptionsApi,
    FunctionsApi,
    gateway_pb2_grpc.GatewayServicer,
):
    """Every call but Authenticate is authenticated; stream calls are authorized per stream:
    Publish needs `publish`, Consume `consume`, Ensure/DeleteStream `admin`, DescribeStream
    any permission on the stream; ListStreams shows the streams the caller holds any
    permission on. Security admin RPCs (`SecurityApi`) and placement (`ClusterApi`) need
    `admin` on `*`; subscription administration, stream stats and peek are
    `SubscriptionsApi`'s; processing functions (`FunctionsApi`) need `admin` on `*`."""

    def __init__(
        self,
        streams: StreamRegistry,
        upstream: Upstream,
        guard: Guard,
        auth: AuthForwarder,
        max_message_bytes: int,
        ephemeral: EphemeralHub,
        requests: RequestBroker,
        consume_setup_slots: int = 32,
    ) -> None:
        self._streams = streams
        self._ephemeral = ephemeral
        self._requests = requests
        self._upstream = upstream
        self._guard = guard
        self._auth = auth
        self._max_message_bytes = max_message_bytes
        self.consumers_per_connection = ConsumersPerConnection(0)
        #: Client consume streams in setup or teardown at once (`--consume-setup-slots`): gRPC's
        #: server takes one new call per event-loop round, so the rounds must stay short
        #: while a crowd attaches, or a publish waits behind thousands of setups.
        self._consume_setups = asyncio.Semaphore(consume_setup_slots)

    async def Authenticate(
        self, request: gateway_pb2.AuthenticateRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.AuthenticateResponse:
        if not request.api_key:
            # Refused here, never reaching auth: audited here, like auth's refusals.
            await self._guard.audit.record(
                LOGIN,
                actor="(unknown)",
                action="authenticate",
                target="api key",
                outcome="refused",
                source=context.peer() or "unknown",
                detail="api_key is required",
            )
            raise InvalidArgument("api_key is required")
        response = await self._auth.call(
            "Authenticate",
            auth_pb2.AuthRequest(api_key=request.api_key),
            "(login)",
            context.peer() or "unknown",
        )
        return gateway_pb2.AuthenticateResponse(
            token=response.token, expires_at_unix=response.expires_at_unix
        )

    async def EnsureStream(
        self, request: gateway_pb2.EnsureStreamRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.EnsureStreamResponse:
        check_name("stream", request.name)
        principal = await self._authorize(context, Permission.ADMIN, request.name, "EnsureStream")
        wanted = stream_def(request.name, request.config)
        result = await self._streams.ensure(wanted, overwrite=request.overwrite)
        if result.created or (request.overwrite and result.differences):
            await self._audit_admin(
                context,
                principal,
                "stream.create" if result.created else "stream.change",
                f"stream {request.name}",
            )
        return gateway_pb2.EnsureStreamResponse(
            stream=stream_info(result.stream),
            created=result.created,
            differences=result.differences,
        )

    async def DescribeStream(
        self, request: gateway_pb2.DescribeStreamRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.StreamInfo:
        check_name("stream", request.name)
        await self._authorize(context, None, request.name, "DescribeStream")
        return stream_info(await self._streams.describe(request.name, fresh=True))

    async def ListStreams(
        self, request: gateway_pb2.ListStreamsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListStreamsResponse:
        principal = await self._principal(context, "ListStreams")
        policy = self._guard.policy
        return gateway_pb2.ListStreamsResponse(
            streams=[
                stream_info(s)
                for s in await self._streams.list()
                if policy.allows_any(principal.subject, s.name)
            ]
        )

    async def DeleteStream(
        self, request: gateway_pb2.DeleteStreamRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.DeleteStreamResponse:
        check_name("stream", request.name)
        principal = await self._authorize(context, Permission.ADMIN, request.name, "DeleteStream")
        deleted = await self._streams.delete(request.name)
        if deleted:
            await self._audit_admin(context, principal, "stream.delete", f"stream {request.name}")
        return gateway_pb2.DeleteStreamResponse(deleted=deleted)

    async def Lookup(
        self, request: gateway_pb2.LookupRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.LookupResponse:
        """Each partition's owner router client address and claim epoch (the direct
        path, docs/cluster.md section 5); any permission on the stream."""
        check_name("stream", request.stream)
        await self._authorize(context, None, request.stream, "Lookup")
        stream = await self._streams.describe(request.stream)
        owners = (
            []
            if stream.ephemeral
            else await self._upstream.routes.lookup(stream.name, stream.partitions)
        )
        return gateway_pb2.LookupResponse(
            partitions=[
                gateway_pb2.PartitionOwner(partition=p, address=a, epoch=e) for p, a, e in owners
            ]
        )

    async def Publish(
        self, request: gateway_pb2.PublishRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PublishResponse:
        return await self._publish(request, context)

    async def PublishStream(
        self,
        request_iterator: AsyncIterator[gateway_pb2.PublishRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[gateway_pb2.PublishStreamResponse]:
        """Publish calls pipelined on one stream (`tamto_common.pipelined`). Each call
        is authenticated and authorized as a unary Publish, with the stream's token."""

        async def publish(request: gateway_pb2.PublishRequest) -> gateway_pb2.PublishResponse:
            return await self._publish(request, context)

        async for answer in answer_calls(
            request_iterator,
            publish,
            gateway_pb2.PublishStreamResponse,
            PUBLISH,
        ):
            yield answer

    async def _publish(
        self, request: gateway_pb2.PublishRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PublishResponse:
        check_name("stream", request.stream)
        await self._authorize(context, Permission.PUBLISH, request.stream, "Publish")
        stream = await self._streams.describe(request.stream)
        arrow_ipc = request.batch.arrow_ipc  # each access copies the bytes: once
        check_publish(
            stream, request.partition, arrow_ipc, request.batch.count, self._max_message_bytes
        )
        base, offsets = await self._upstream.append(
            stream.name,
            request.partition,
            arrow_ipc,
            request.batch.count,
            order_of(request),  # passed on as it came (`tamto_router.producer_turns`)
        )
        return gateway_pb2.PublishResponse(
            partition=request.partition,
            base_offset=base,
            count=request.batch.count,
            offsets=offsets,
        )

    async def Consume(  # type: ignore[override]  # answers encoded responses (bytes)
        self,
        request_iterator: AsyncIterator[messages_pb2.ConsumeRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[bytes]:
        """Responses are the routers' encoded `ConsumeResponse` bytes, forwarded as
        they are (the handler is registered by `serve`)."""
        step = SetupStep()
        try:
            requests = aiter(request_iterator)
            try:
                fan_out, peer = await self._set_up(context, requests, step)
            except TamtoError as exc:
                # In-band first, and the status once the client half-closed, as
                # `FanOut.serve` does: a client still writing (its first credit)
                # as the stream ended would read INTERNAL instead of this refusal.
                yield consume_error(exc.code.value[0], str(exc))
                await _half_closed(requests)
                raise
            step.to("serving")
            reader = asyncio.create_task(_forward_all(requests, fan_out))
            fan_out.stop_when_done(reader)
            try:
                async for response in fan_out.serve(reader):
                    yield response
            finally:
                reader.cancel()
                step.to("closing")
                await self._close_consume(fan_out, reader, peer)
        finally:
            step.done()

    async def _set_up(
        self,
        context: grpc.aio.ServicerContext,
        requests: AsyncIterator[messages_pb2.ConsumeRequest],
        step: SetupStep,
    ) -> tuple[FanOut, str]:
        """A consume stream's setup, in its turn (`_consume_setups`).

        The subscribe is awaited within the turn for at most `SUBSCRIBE_IN_TURN_S`:
        a crowd's subscribes are then read at the pace of the turns, and a client
        that has not sent it by then gives the turn up, waits for it without one
        and takes another, so an idle client holds a turn at most that long.
        """
        gate = self._consume_setups
        step.to("waiting its turn")
        await gate.acquire()
        held = True
        read: asyncio.Future[messages_pb2.ConsumeRequest | None] | None = None
        try:
            step.to("authenticating")
            principal = await self._principal(context, "Consume")
            step.to("reading subscribe")
            read = asyncio.ensure_future(anext(requests, None))
            await asyncio.wait({read}, timeout=SUBSCRIBE_IN_TURN_S)
            if not read.done():
                gate.release()
                held = False
                await read
                step.to("waiting its turn")
                await gate.acquire()
                held = True
            return await self._open_consume(context, principal, read.result(), step)
        finally:
            if read is not None and not read.done():
                read.cancel()
            if held:
                gate.release()

    async def _close_consume(self, fan_out: FanOut, reader: asyncio.Task[None], peer: str) -> None:
        """End a consume stream's sessions, in turn with the setups (`_consume_setups`):
        a crowd leaving at once then keeps the event loop's rounds short as well. It
        is done even if the wait for a turn is cancelled."""
        turn = False
        try:
            await self._consume_setups.acquire()
            turn = True
        finally:
            try:
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
                self.consumers_per_connection.leave(peer)
                await fan_out.close()
            finally:
                if turn:
                    self._consume_setups.release()

    async def _open_consume(
        self,
        context: grpc.aio.ServicerContext,
        principal: Principal,
        first: messages_pb2.ConsumeRequest | None,
        step: SetupStep,
    ) -> tuple[FanOut, str]:
        """A consume stream's setup after its first request, up to its sessions with
        the routers: its fan-out and the client's address (counted in
        `consumers_per_connection`)."""
        if first is None or first.WhichOneof("request") != "subscribe":
            raise InvalidArgument("a consume stream must start with subscribe")
        sub = first.subscribe
        check_name("stream", sub.stream)
        check_name("subscription", sub.subscription)
        check_consumer_name(sub.consumer_name)
        check_consumer_id(sub.consumer_id)
        if sub.start.WhichOneof("position") == "time_us":
            check_start_time_us(sub.start.time_us)
        step.to("authorizing")
        await self._guard.require(
            principal, Permission.CONSUME, sub.stream, context.peer() or "unknown", "Consume"
        )
        step.to("describing")
        stream = await self._streams.describe(sub.stream)
        if stream.ephemeral:
            raise FailedPrecondition(
                f"stream {stream.name!r} is ephemeral: receive with SubscribeEphemeral"
            )
        partitions = list(check_partitions(sub.partitions)) or list(range(stream.partitions))
        outside = [p for p in partitions if p >= stream.partitions]
        if outside:
            raise InvalidArgument(f"stream {stream.name!r} has no partition {outside[0]}")
        peer = context.peer() or "unknown"
        self.consumers_per_connection.enter(peer)
        sub.client_address = peer  # DescribeSubscription shows it (never the client's claim)
        fan_out = FanOut(self._upstream, sub)
        try:
            step.to("opening")
            await fan_out.open(partitions)
        except BaseException:
            self.consumers_per_connection.leave(peer)
            await fan_out.close()
            raise
        return fan_out, peer


def serve(servicer: GatewayServicer, server: grpc.aio.Server) -> None:
    """Register the gateway's RPCs; Consume forwards already encoded responses."""
    gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, server)
    raw_responses(
        server,
        "tamto.v1.Gateway",
        "Consume",
        servicer.Consume,
        messages_pb2.ConsumeRequest.FromString,
    )


async def _half_closed(requests: AsyncIterator[messages_pb2.ConsumeRequest]) -> None:
    """Read (and drop) the client's requests until it half-closes, for at most
    `REFUSED_END_WAIT_S`."""
    with contextlib.suppress(TimeoutError, TamtoError, grpc.aio.AioRpcError):
        async with asyncio.timeout(REFUSED_END_WAIT_S):
            async for _ in requests:
                pass


async def _forward_all(requests: AsyncIterator[messages_pb2.ConsumeRequest], fan: FanOut) -> None:
    """Forward the client's requests until it half-closes. A request that breaks a
    rule fails the session; what comes after it is read and ignored."""
    async for request in requests:
        if fan.failure is not None:
            continue
        await fan.forward_or_fail(request)
