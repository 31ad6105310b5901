"""The router's gRPC adapter: protobuf in, domain calls, protobuf out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import grpc
import structlog

from tamto_common.errors import InvalidArgument, NotOwner, TamtoError
from tamto_common.grpc_errors import in_band_status, status_for
from tamto_common.names import check_name
from tamto_common.pipelined import answer_calls
from tamto_common.subscribe import (
    check_consumer_id,
    check_consumer_name,
    check_partitions,
    check_range_count,
    check_start_time_us,
)
from tamto_protocol.delivery_wire import (
    consume_delivery,
    consume_error,
    mux_end,
    mux_responses,
    raw_responses,
)
from tamto_protocol.v1 import gateway_pb2, messages_pb2, router_pb2, router_pb2_grpc
from tamto_protocol.wire import ROUTER_APPEND, ROUTER_PUBLISH, order_of
from tamto_router.admin import SubscriptionAdmin
from tamto_router.admin_api import AdminApi
from tamto_router.client_api import ClientPublish
from tamto_router.consume import ConsumeSession, Start, SubscribeSpec, SubscriptionRegistry
from tamto_router.consume_mux import ConsumeMux
from tamto_router.model import ProducerOrder
from tamto_router.partitions import Partitions
from tamto_router.subscription import SubscriptionType

logger = structlog.get_logger(__name__)

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
        check_consumer_id(sub.consumer_id),
    )


def serve(servicer: RouterServicer, server: grpc.aio.Server) -> None:
    """Register the router's RPCs; Consume and ConsumeMux send their responses
    already encoded."""
    router_pb2_grpc.add_RouterServicer_to_server(servicer, server)
    raw_responses(
        server,
        "tamto.v1.Router",
        "Consume",
        servicer.Consume,
        messages_pb2.ConsumeRequest.FromString,
    )
    raw_responses(
        server,
        "tamto.v1.Router",
        "ConsumeMux",
        servicer.ConsumeMux,
        router_pb2.ConsumeMuxRequests.FromString,
    )


def serve_clients(servicer: RouterServicer, server: grpc.aio.Server) -> None:
    """Register only what clients call directly (`Publish`, `PublishStream`): the
    listener of `server` asks for no client certificate, so no service RPC is on it."""
    request = gateway_pb2.PublishRequest.FromString
    handlers = {
        "Publish": grpc.unary_unary_rpc_method_handler(
            servicer.Publish,
            request_deserializer=request,
            response_serializer=gateway_pb2.PublishResponse.SerializeToString,
        ),
        "PublishStream": grpc.stream_stream_rpc_method_handler(
            servicer.PublishStream,
            request_deserializer=request,
            response_serializer=gateway_pb2.PublishStreamResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("tamto.v1.Router", handlers),)
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
            _producer_order(request),
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
        appended = await log.append(arrow_ipc, request.batch.count, _producer_order(request))
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
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        async for response in _session_responses(first, requests, self._subscriptions):
            yield response

    async def ConsumeMux(  # type: ignore[override]  # answers encoded responses (bytes)
        self,
        request_iterator: AsyncIterator[router_pb2.ConsumeMuxRequests],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[bytes]:
        """A gateway's consume sessions on one stream (`ConsumeMux`); responses are
        encoded `ConsumeMuxResponses` bytes (see `serve`)."""
        await context.send_initial_metadata(())  # the gateway's sign that the method exists
        mux = consume_mux(self._subscriptions)
        reader = asyncio.create_task(read_mux(request_iterator, mux))
        # A request that does not parse ends the reader: the stream ends with its status.
        reader.add_done_callback(lambda _: mux.out.put_nowait(None))
        try:
            async for batch in mux.batches():
                yield mux_responses(batch)
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                raise reader.exception()  # type: ignore[misc]
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await mux.abandon_all()


async def _session_responses(
    first: messages_pb2.ConsumeRequest | None,
    requests: AsyncIterator[messages_pb2.ConsumeRequest],
    registry: SubscriptionRegistry,
    mux_session: int | None = None,
) -> AsyncIterator[bytes]:
    """One consume session (`first` its subscribe, then `requests`) as encoded
    responses: `ConsumeResponse`s on a Consume stream, `ConsumeMuxResponse`s of
    session `mux_session` on a mux (which ends the session with its status).

    On a Consume stream an error's status goes in-band first, and is raised once
    the client has half-closed, so that no write of its races with the end of the
    stream (gRPC would report that as INTERNAL and hide this one).
    """
    if first is None or first.WhichOneof("request") != "subscribe":
        raise InvalidArgument("a consume stream must start with subscribe")
    spec = spec_from_proto(first.subscribe)
    reader: asyncio.Task[None] | None = None
    try:
        async with ConsumeSession(spec, registry) as session:
            reader = asyncio.create_task(_read_requests(requests, session))
            session.stop_when_done(reader)
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
                        mux_session,
                    )
            except TamtoError as exc:
                if mux_session is not None:
                    raise
                yield consume_error(*in_band_status(exc))
                await asyncio.wait({reader}, timeout=END_WAIT_S)
                raise
            finally:
                # Not awaited before the session detaches: a session cancelled (a
                # killed consumer's) must leave its subscriptions before this task
                # next yields, or its successor, opened right after on a mux,
                # finds an exclusive subscription still taken.
                reader.cancel()
    finally:
        if reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await reader


def consume_mux(registry: SubscriptionRegistry) -> ConsumeMux[messages_pb2.ConsumeRequest]:
    """A `ConsumeMux` whose sessions are consume sessions of `registry` (as
    Consume streams), ended with their status."""
    return ConsumeMux(
        lambda sid, first, requests: _session_responses(first, requests, registry, sid),
        _mux_end,
    )


async def read_mux(
    requests: AsyncIterator[router_pb2.ConsumeMuxRequests],
    mux: ConsumeMux[messages_pb2.ConsumeRequest],
) -> None:
    """Hand the gateway's mux requests to their sessions until it half-closes."""

    def dispatch(request: router_pb2.ConsumeMuxRequest) -> None:
        kind = request.WhichOneof("request")
        if kind == "consume":
            mux.consume(request.session, request.consume)
        elif kind == "end":
            mux.end(request.session)
        else:  # cancel, or a kind this router does not know: abandon the session
            mux.cancel(request.session)

    await mux.read((message.requests async for message in requests), dispatch)


def _mux_end(sid: int, error: Exception | None) -> bytes:
    """The end of mux session `sid`: clean, or the status of its error."""
    if error is None:
        return mux_end(sid, 0, "")
    status = status_for(error)
    if status is None:
        logger.error("consume mux session failed", session=sid, exc_info=error)
        status = (grpc.StatusCode.INTERNAL, "internal error")
    return mux_end(sid, status[0].value[0], status[1])


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
        await session.ack(request.ack.partition, _ranges("ack", request.ack.ranges))
    elif kind == "nack":
        nack = request.nack
        session.nack(nack.partition, _ranges("nack", nack.ranges), nack.delay_ms / 1000)
    elif kind == "term":
        term = request.term
        await session.term(term.partition, _ranges("term", term.ranges), term.reason)
    elif kind == "in_progress":
        progress = request.in_progress
        session.in_progress(progress.partition, _ranges("in_progress", progress.ranges))
    elif kind == "close":
        session.close_cleanly()
    elif kind == "subscribe":
        raise InvalidArgument("subscribe may be sent only once per consume stream")
    else:
        raise InvalidArgument(
            "a consume request must set one of subscribe (first), credit, ack, nack, term, "
            "in_progress or close"
        )


def _ranges(kind: str, ranges: Sequence[messages_pb2.OffsetRange]) -> list[tuple[int, int]]:
    """A request's ranges as (first, last), once their number is within the limit."""
    check_range_count(f"{kind}.ranges", len(ranges))
    return [(r.first, r.last) for r in ranges]


def _producer_order(
    request: gateway_pb2.PublishRequest | router_pb2.RouterAppendRequest,
) -> ProducerOrder | None:
    """The batch's place among its producer's batches in flight, if it has one."""
    order = order_of(request)
    return ProducerOrder(*order) if order is not None else None
