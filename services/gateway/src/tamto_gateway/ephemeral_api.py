"""The Gateway RPCs of ephemeral streams and request/reply: authorize, validate, hand over.

A mixin of `GatewayServicer` (like `SecurityApi`), so the ephemeral RPCs live
beside the others' authentication and authorization without crowding
`grpc_api.py`. Protobuf stops here: `EphemeralHub` and `RequestBroker` get
checked domain values and Arrow bytes. PublishEphemeral and Request need
`publish` on the stream, SubscribeEphemeral `consume`; Reply only an
authenticated caller (a response stream's name is its capability).

PublishEphemeral, Request and Reply also have a stream method each
(PublishEphemeralStream, RequestStream, ReplyStream) carrying their calls
pipelined, as durable PublishStream does (`tamto_common.pipelined`): a client
pays gRPC's per-call setup once per stream instead of once per call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from tamto_common.decoding import Undecodable
from tamto_common.errors import FailedPrecondition, InvalidArgument, NotFound
from tamto_common.names import check_name
from tamto_common.pipelined import answer_calls
from tamto_common.policy import Permission
from tamto_common.streams import StreamDef
from tamto_gateway.ephemeral import EphemeralHub
from tamto_gateway.ephemeral_consumer import subscribed_event
from tamto_gateway.guarded import Guarded
from tamto_gateway.requests import GENERATED, RequestBroker, RequestOptions, check_reply_error
from tamto_gateway.topics import TopicPattern, check_topic
from tamto_protocol.batch import BatchFormatError, validate_batch
from tamto_protocol.capabilities import SINGLE_MESSAGE_METADATA
from tamto_protocol.message_size import MessageTooLarge
from tamto_protocol.pipelined import (
    MORE_ANSWERS_METADATA,
    MORE_CALLS_METADATA,
    MOST_CALLS_PER_MESSAGE,
)
from tamto_protocol.single_message import as_batch, check_single_message
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_protocol.wire import PUBLISH_EPHEMERAL, REPLY, REQUEST

if TYPE_CHECKING:
    from tamto_gateway.streams import StreamRegistry


#: The most deliveries one SubscribeEphemeral event carries, whatever the consumer asked.
MAX_DELIVERIES_PER_EVENT = 256


def _pipelined(
    unary: Callable[..., Awaitable[Any]], response_type: Any, method: str, several: bool = False
) -> Any:
    """The stream method carrying `unary`'s calls pipelined (`tamto_common.pipelined`),
    each authorized and answered as the unary call would be. `several`: a stream
    message may carry further calls (`more_calls`) and, to a client that says it
    reads them, an answer further answers (`more_answers`): `tamto_protocol.pipelined`."""

    async def stream(
        self: EphemeralApi, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async def call(request: Any) -> Any:
            return await unary(self, request, context)

        if not several:
            async for answer in answer_calls(requests, call, response_type, method):
                yield answer
            return
        await context.send_initial_metadata(
            ((MORE_CALLS_METADATA, "1"), (SINGLE_MESSAGE_METADATA, "1"))
        )
        answers = answer_calls(_each_call(requests), call, response_type, method)
        if not any(key == MORE_ANSWERS_METADATA for key, _ in context.invocation_metadata() or ()):
            async for answer in answers:
                yield answer
            return
        async for answer in _together(answers):
            yield answer

    return stream


async def _each_call(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Every call of a stream whose messages may carry further calls (`more_calls`); a
    message that did not parse (`Undecodable`) goes on as it is, to be refused alone."""
    async for request in requests:
        if isinstance(request, Undecodable):
            yield request
            continue
        more = list(request.more_calls)
        if more:
            request.ClearField("more_calls")
        yield request
        for other in more:
            yield other


async def _together(answers: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """`answers` as they come, those that came while the previous one was written
    carried in the next one's `more_answers` (at most `MOST_CALLS_PER_MESSAGE`)."""
    ready: asyncio.Queue[Any] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for answer in answers:
                ready.put_nowait(answer)
        finally:
            ready.put_nowait(None)

    pumping = asyncio.create_task(pump(), name="pipelined-answers")
    try:
        while (first := await ready.get()) is not None:
            ended = False
            while not ready.empty() and len(first.more_answers) < MOST_CALLS_PER_MESSAGE:
                other = ready.get_nowait()
                if other is None:
                    ended = True
                    break
                first.more_answers.append(other)
            yield first
            if ended:
                break
        await pumping  # a malformed request ends the stream with its status
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping


class EphemeralApi(Guarded):
    """PublishEphemeral, SubscribeEphemeral, Request and Reply (see the module docstring)."""

    _streams: StreamRegistry
    _max_message_bytes: int
    _ephemeral: EphemeralHub
    _requests: RequestBroker

    async def _ephemeral_stream(self, name: str) -> StreamDef:
        """The definition of ephemeral stream `name`: NOT_FOUND if missing,
        FAILED_PRECONDITION if it is persistent or a response stream."""
        refusal = f"{name!r} is a response stream: only its requester receives from it"
        if GENERATED.fullmatch(name):
            raise FailedPrecondition(refusal)
        try:
            stream = await self._streams.describe(name)
        except NotFound:
            try:
                stream = await self._streams.describe(name, fresh=True)
            except NotFound:
                if await self._requests.in_use(name):
                    raise FailedPrecondition(refusal) from None
                raise
        if not stream.ephemeral:
            raise FailedPrecondition(
                f"stream {name!r} is persistent: use Publish and Consume (topics, matches "
                "and groups are for ephemeral streams)"
            )
        return stream

    def _checked_batch(self, batch: messages_pb2.RecordBatch) -> bytes:
        arrow_ipc = batch.arrow_ipc  # each access copies the bytes: once
        try:
            validate_batch(arrow_ipc, batch.count, self._max_message_bytes)
        except BatchFormatError as exc:
            raise InvalidArgument(f"malformed batch: {exc}") from None
        return arrow_ipc

    def _checked_single(self, message: gateway_pb2.SingleMessage) -> None:
        try:
            check_single_message(message, self._max_message_bytes)
        except MessageTooLarge as exc:
            raise InvalidArgument(f"malformed message: {exc}") from None

    async def PublishEphemeral(
        self, request: gateway_pb2.PublishEphemeralRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PublishEphemeralResponse:
        check_name("stream", request.stream)
        await self._authorize(context, Permission.PUBLISH, request.stream, "PublishEphemeral")
        runs = [(request.topic, request.batch), *((r.topic, r.batch) for r in request.more_runs)]
        for topic, _ in runs:
            check_topic(topic)
        stream = await self._ephemeral_stream(request.stream)
        # Every run checked before the first is published: a refused call publishes nothing.
        checked = [(topic, self._checked_batch(batch), batch.count) for topic, batch in runs]
        matched = 0
        for topic, arrow_ipc, count in checked:  # in order: a producer's order is kept
            matched = max(matched, await self._ephemeral.publish(stream, topic, arrow_ipc, count))
        return gateway_pb2.PublishEphemeralResponse(
            count=sum(count for _, _, count in checked), matched_entities=matched
        )

    async def SubscribeEphemeral(
        self, request: gateway_pb2.SubscribeEphemeralRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Responses are encoded `EphemeralEvent`s (registered by `serve_ephemeral`)."""
        check_name("stream", request.stream)
        await self._authorize(context, Permission.CONSUME, request.stream, "SubscribeEphemeral")
        pattern = TopicPattern.parse(request.match if request.HasField("match") else "#")
        if request.group:
            check_name("group", request.group)
        stream = await self._ephemeral_stream(request.stream)
        async with self._ephemeral.consumer(
            stream, pattern, request.group, request.single_messages
        ) as (consumer, entity):
            yield subscribed_event(entity)
            most = min(max(1, request.max_deliveries_per_event), MAX_DELIVERIES_PER_EVENT)
            while True:
                yield await consumer.next_event(most)

    async def Request(
        self, request: gateway_pb2.RequestRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.RequestResponse:
        check_name("stream", request.stream)
        await self._authorize(context, Permission.PUBLISH, request.stream, "Request")
        check_topic(request.topic)
        stream = await self._ephemeral_stream(request.stream)
        single, arrow_ipc = None, b""
        if request.HasField("message"):
            single = request.message
            self._checked_single(single)
        else:
            arrow_ipc = self._checked_batch(request.batch)
        options = RequestOptions(
            request.response_stream,
            request.timeout_ms,
            request.wait_for_responder,
            request.gather,
            request.max_replies,
        )
        name, replies = await self._requests.request(
            stream, request.topic, arrow_ipc, request.batch.count, options, single
        )
        reads = _reads_single(context)
        if not request.gather:
            return gateway_pb2.RequestResponse(response_stream=name, **_reply(replies[0], reads))
        gathered = [gateway_pb2.GatheredReply(error=r.error, **_reply(r, reads)) for r in replies]
        return gateway_pb2.RequestResponse(response_stream=name, replies=gathered)

    async def Reply(
        self, request: gateway_pb2.ReplyRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ReplyResponse:
        await self._principal(context, "Reply")
        check_name("response stream", request.response_stream)
        if request.error.code:
            check_reply_error(request.error.code, request.error.message)
        elif request.HasField("message"):
            self._checked_single(request.message)
        else:
            self._checked_batch(request.batch)
        await self._requests.reply(request)
        return gateway_pb2.ReplyResponse()

    PublishEphemeralStream = _pipelined(
        PublishEphemeral, gateway_pb2.PublishEphemeralStreamResponse, PUBLISH_EPHEMERAL
    )
    RequestStream = _pipelined(Request, gateway_pb2.RequestStreamResponse, REQUEST, True)
    ReplyStream = _pipelined(Reply, gateway_pb2.ReplyStreamResponse, REPLY, True)


def _reads_single(context: grpc.aio.ServicerContext) -> bool:
    """Whether the caller said it reads replies as `SingleMessage`s."""
    return any(key == SINGLE_MESSAGE_METADATA for key, _ in context.invocation_metadata() or ())


def _reply(reply: gateway_pb2.ReplyRequest, single: bool) -> dict[str, Any]:
    """The fields of an answer carrying `reply`: as the replier sent it, or as a
    batch to a caller that reads no `SingleMessage`."""
    if not reply.HasField("message"):
        return {"batch": reply.batch}
    if single:
        return {"message": reply.message}
    return {"batch": as_batch(reply.message)}


def serve_ephemeral(servicer: EphemeralApi, server: grpc.aio.Server) -> None:
    """Register SubscribeEphemeral to send its already encoded events as they are
    (after the generated registration, which it takes over)."""
    handler = grpc.unary_stream_rpc_method_handler(
        servicer.SubscribeEphemeral,
        request_deserializer=gateway_pb2.SubscribeEphemeralRequest.FromString,
        response_serializer=None,
    )
    server.add_registered_method_handlers("tamto.v1.Gateway", {"SubscribeEphemeral": handler})
