"""Authenticated unary calls with retries and error translation (internal)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import grpc

from tamto_protocol.capabilities import SINGLE_MESSAGE_METADATA
from tamto_protocol.pipelined import Encode, PipelinedCalls
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_protocol.wire import (
    PUBLISH,
    PUBLISH_EPHEMERAL,
    PUBLISH_EPHEMERAL_STREAM,
    PUBLISH_STREAM,
    REPLY,
    REPLY_STREAM,
    REQUEST,
    REQUEST_STREAM,
)
from tamto_sdk._retry import with_retries
from tamto_sdk.auth import TokenAuth
from tamto_sdk.errors import Closed, TamtoError, Unauthenticated, from_rpc_error
from tamto_sdk.options import ClientOptions


class DirectRoute(Protocol):
    """What the calls need of the direct path (`tamto_sdk.direct.DirectPublisher`).

    A protocol, so that this module does not import the direct path, which builds
    on these calls."""

    async def publish(self, stream: str, partition: int, request: Encode) -> Any | None: ...

    async def close(self) -> None: ...


CONSUME = "/tamto.v1.Gateway/Consume"


class Calls:
    """Makes unary gateway calls: bearer metadata, one re-auth, retries, typed errors."""

    def __init__(
        self, stub: Any, auth: TokenAuth, options: ClientOptions, channel: grpc.aio.Channel
    ) -> None:
        self.stub = stub
        self.auth = auth
        self.options = options
        #: Publish calls pipelined on one stream, each request written in wire form by
        #: a function of its call id (`tamto_protocol.pipelined`, `tamto_protocol.wire`).
        self.publish_raw = PipelinedCalls(
            channel,
            PUBLISH_STREAM,
            gateway_pb2.PublishStreamResponse,
            fallback=(PUBLISH, gateway_pb2.PublishResponse),
        )
        #: PublishEphemeral calls pipelined on one stream the same way, each request in
        #: wire form (`publish_ephemeral_request`).
        self.publish_ephemeral_raw = PipelinedCalls(
            channel,
            PUBLISH_EPHEMERAL_STREAM,
            gateway_pb2.PublishEphemeralStreamResponse,
            fallback=(PUBLISH_EPHEMERAL, gateway_pb2.PublishEphemeralResponse),
        )
        #: Request and Reply calls, pipelined on a stream each, several per stream
        #: message when they come together (`more_calls`, field 16 of both).
        self.request_raw = PipelinedCalls(
            channel,
            REQUEST_STREAM,
            gateway_pb2.RequestStreamResponse,
            fallback=(REQUEST, gateway_pb2.RequestResponse),
            more_calls=16,
            opening_metadata=((SINGLE_MESSAGE_METADATA, "1"),),
        )
        self.reply_raw = PipelinedCalls(
            channel,
            REPLY_STREAM,
            gateway_pb2.ReplyStreamResponse,
            fallback=(REPLY, gateway_pb2.ReplyResponse),
            more_calls=16,
        )
        #: Consume handing its responses over as bytes (`parse_consume_response`).
        self.consume_raw = channel.stream_stream(
            CONSUME,
            request_serializer=messages_pb2.ConsumeRequest.SerializeToString,
            response_deserializer=None,
        )

        #: Publishes straight to partition owners (`ClientOptions.direct`), else None.
        self.direct: DirectRoute | None = None
        self.closed = False

    async def close(self) -> None:
        """End the publish streams (the producers are closed first, so nothing waits on them)."""
        self.closed = True
        await self.publish_raw.close()
        for calls in (self.publish_ephemeral_raw, self.request_raw, self.reply_raw):
            await calls.close()
        if self.direct is not None:
            await self.direct.close()

    async def unary(
        self,
        method: Callable[..., Any],
        request: Any,
        *,
        retry: bool = True,
        deduplicated: bool = False,
    ) -> Any:
        """Invoke `method(request)` and return its response or raise a `TamtoError`.

        `deduplicated`: the request carries ids the server deduplicates, so a call
        whose connection was torn down mid-call is retried too (`from_rpc_error`).
        """
        if self.closed:
            raise Closed("client is closed")
        reauthenticated = False

        async def attempt() -> Any:
            nonlocal reauthenticated
            metadata = await self.auth.metadata()
            try:
                return await method(request, metadata=metadata, timeout=self.options.rpc_timeout_s)
            except grpc.aio.AioRpcError as exc:
                error: TamtoError = from_rpc_error(exc, deduplicated=deduplicated)
            if isinstance(error, Unauthenticated) and not reauthenticated:
                reauthenticated = True
                await self.auth.renew_after_rejection(metadata)
                return await attempt()
            raise error

        return await with_retries(attempt, self.options, retry=retry)
