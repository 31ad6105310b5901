"""The router's gRPC adapter: protobuf in, domain calls, protobuf out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc

from tamto_common.errors import InvalidArgument, NotOwner, TamtoError
from tamto_common.names import check_name
from tamto_common.pipelined import answer_calls
from tamto_common.subscribe import check_consumer_name, check_partitions, check_start_time_us
from tamto_protocol.delivery_wire import consume_delivery, consume_error, raw_responses
from tamto_protocol.v1 import gateway_pb2, messages_pb2, router_pb2, router_pb2_grpc
from tamto_protocol.wire import ROUTER_APPEND, ROUTER_PUBLISH
from tamto_router.admin import SubscriptionAdmin
from tamto_router.admin_api import AdminApi
from tamto_router.client_api import ClientPublish
from tamto_router.consume import ConsumeSession, Start, SubscribeSpec, SubscriptionRegistry
from tamto_router.partitions import Partitions
from tamto_router.subscription import SubscriptionType

#: Longest an erring consume stream waits for its client's half-close (see `Consume`).
END_WAIT_S = 2.0

_TYPES = {
    messages_pb2.SUBSCRIPTION_TYPE_UNSPECIFIED: SubscriptionType.EXCLUSIVE,
    messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE: SubscriptionType.EXCLUSIVE,
    messages_pb2.SUBSCRIPTION_TYPE_FAILOVER: SubscriptionType.FAILOVER,
    messages_pb2.SUBSCRIPTION_TYPE_SHARED: SubscriptionType.SHARED,
    messages_pb2.SUBSCRIPTION_TYPE_KEY_SHARED: SubscriptionType.KEY_SHARED,
    messages_pb2.SUBSCRIPTION_TYPE_MULTICAST: SubscriptionType.MULTICAST,
}


def start_from_proto(start: messages_pb2.StartPosition) -> Start:
    which = start.WhichOneof("position")
    if which == "latest":
        return Start("latest")
    if which == "offset":
        if start.offset < 0:
            raise InvalidArgument(f"start offset must be >= 0, got {start.offset}")
        return Start("offset", start.offset)
    if which == "time_us":
        return Start("time", check_start_time_us(start.time_us))
    return Start("earliest")


def spec_from_proto(sub: messages_pb2.Subscribe) -> SubscribeSpec:
    check_name("stream", sub.stream)
    check_name("subscription", sub.subscription)
    if not sub.partitions:
        raise InvalidArgument("a router consume session must name its partitions")
    if sub.type not in _TYPES:
        raise InvalidArgument(f"unknown subscription type {sub.type}")
    if _TYPES[sub.type] is SubscriptionType.MULTICAST:
        if not sub.consumer_name:
            raise InvalidArgument("a multicast consumer needs a consumer_name (its own cursor)")
        check_name("consumer", sub.consumer_name)
    return SubscribeSpec(
        sub.stream,
        sub.subscription,
        start_from_proto(sub.start),
        check_partitions(sub.partitions),
        _TYPES[sub.type],
        check_consumer_name(sub.consumer_name),
        sub.client_address[:256],
    )


def serve(servicer: RouterServicer, server: grpc.aio.Server) -> None:
    """Register the router's RPCs; Consume sends its responses already encoded."""
    router_pb2_grpc.add_RouterServicer_to_server(servicer, server)
    raw_responses(
        server,
        "tamto.v1.Router",
        "Consume",
        servicer.Consume,
        messages_pb2.ConsumeRequest.FromString,
    )


class RouterServicer(AdminApi, router_pb2_grpc.RouterServicer):
    def __init__(
        self,
        partitions: Partitions,
        subscriptions: SubscriptionRegistry,
        instance: str = "",
        clients: ClientPublish | None = None,
    ) -> None:
        self._partitions = partitions
        self._subscriptions = subscriptions
        self._admin = SubscriptionAdmin(partitions, subscriptions, instance)
        #: Clients' publishes (the direct path); None: this router serves no clients.
        self._clients = clients

    async def Publish(
        self, request: gateway_pb2.PublishRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PublishResponse:
        return await self._client_publish(request, context)

    async def PublishStream(
        self,
        request_iterator: AsyncIterator[gateway_pb2.PublishRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[gateway_pb2.PublishStreamResponse]:
        """A client's publish calls pipelined on one stream, each authorized with the
        stream's token as a unary Publish (as `Gateway.PublishStream`)."""

        async def publish(request: gateway_pb2.PublishRequest) -> gateway_pb2.PublishResponse:
            return await self._client_publish(request, context)

        async for answer in answer_calls(
            request_iterator, publish, gateway_pb2.PublishStreamResponse, ROUTER_PUBLISH
        ):
            yield answer

    async def _client_publish(
        self, request: gateway_pb2.PublishRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PublishResponse:
        if self._clients is None:
            raise NotOwner("this router serves no clients: publish through a gateway", "")
        appended = await self._clients.publish(
            context.invocation_metadata(),
            context.peer() or "unknown",
            request.stream,
            request.partition,
            request.batch.arrow_ipc,  # each access copies the bytes: once
            request.batch.count,
        )
        return gateway_pb2.PublishResponse(
            partition=request.partition,
            base_offset=appended.base_offset,
            count=request.batch.count,
            offsets=appended.offsets or [],
        )

    async def Append(
        self, request: router_pb2.RouterAppendRequest, context: grpc.aio.ServicerContext
    ) -> router_pb2.RouterAppendResponse:
        return await self._append(request)

    async def AppendStream(
        self,
        request_iterator: AsyncIterator[router_pb2.RouterAppendRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[router_pb2.RouterAppendStreamResponse]:
        """Append calls pipelined on one stream (`tamto_common.pipelined`)."""
        async for answer in answer_calls(
            request_iterator,
            self._append,
            router_pb2.RouterAppendStreamResponse,
            ROUTER_APPEND,
        ):
            yield answer

    async def _append(
        self, request: router_pb2.RouterAppendRequest
    ) -> router_pb2.RouterAppendResponse:
        check_name("stream", request.stream)
        arrow_ipc = request.batch.arrow_ipc  # each access copies the bytes: once
        if request.batch.count == 0 or not arrow_ipc:
            raise InvalidArgument("append needs a non-empty batch")
        log = await self._partitions.get(request.stream, request.partition)
        appended = await log.append(arrow_ipc, request.batch.count)
        return router_pb2.RouterAppendResponse(
            base_offset=appended.base_offset,
            count=appended.count,
            offsets=appended.offsets or [],
        )

    async def Consume(  # type: ignore[override]  # answers encoded responses (bytes)
        self,
        request_iterator: AsyncIterator[messages_pb2.ConsumeRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[bytes]:
        """Responses are encoded `ConsumeResponse` bytes (see `serve`)."""
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("request") != "subscribe":
            raise InvalidArgument("a consume stream must start with subscribe")
        spec = spec_from_proto(first.subscribe)
        async with ConsumeSession(spec, self._subscriptions) as session:
            reader = asyncio.create_task(_read_requests(request_iterator, session))
            session.stop_when_done(reader)
            try:
                try:
                    async for delivery in session.deliveries():
                        batch = delivery.batch
                        yield consume_delivery(
                            spec.stream,
                            delivery.partition,
                            batch.base_offset,
                            batch.count,
                            batch.publish_time_us,
                            batch.arrow_ipc,
                            delivery.delivery_count,
                            delivery.offsets or (),
                        )
                except TamtoError as exc:
                    # The status in-band first; the status itself once the client has
                    # half-closed, so that no write of its races with the end of the
                    # stream (gRPC would report that as INTERNAL and hide this one).
                    yield consume_error(exc.code.value[0], str(exc))
                    await asyncio.wait({reader}, timeout=END_WAIT_S)
                    raise
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader


async def _read_requests(
    requests: AsyncIterator[messages_pb2.ConsumeRequest], session: ConsumeSession
) -> None:
    """Apply the client's requests until it half-closes. A request that breaks a
    rule fails the session; what comes after it is read and ignored."""
    async for request in requests:
        if session.failure is not None:
            continue
        try:
            await _apply(request, session)
        except TamtoError as exc:
            session.fail(exc)


async def _apply(request: messages_pb2.ConsumeRequest, session: ConsumeSession) -> None:
    """One request of a consume stream (acks are applied before the next is read)."""
    kind = request.WhichOneof("request")
    if kind == "credit":
        session.grant(request.credit.messages)
    elif kind == "ack":
        await session.ack(request.ack.partition, [(r.first, r.last) for r in request.ack.ranges])
    elif kind == "nack":
        nack = request.nack
        session.nack(nack.partition, [(r.first, r.last) for r in nack.ranges], nack.delay_ms / 1000)
    elif kind == "term":
        term = request.term
        await session.term(term.partition, [(r.first, r.last) for r in term.ranges], term.reason)
    elif kind == "in_progress":
        progress = request.in_progress
        session.in_progress(progress.partition, [(r.first, r.last) for r in progress.ranges])
    elif kind == "close":
        session.close_cleanly()
    elif kind == "subscribe":
        raise InvalidArgument("subscribe may be sent only once per consume stream")
    else:
        raise InvalidArgument(
            "a consume request must set one of subscribe (first), credit, ack, nack, term, "
            "in_progress or close"
        )
