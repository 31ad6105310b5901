"""The public Gateway API: authenticate, validate, route. Protobuf stays here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc

from tamto_common.aio import until_done
from tamto_common.errors import InvalidArgument
from tamto_common.names import check_name
from tamto_gateway.consume import FanOut
from tamto_gateway.stream_proto import stream_def, stream_info
from tamto_gateway.streams import StreamRegistry
from tamto_gateway.tokens import Principal, TokenVerifier, bearer_token
from tamto_gateway.upstream import Upstream
from tamto_protocol.batch import BatchFormatError, validate_batch
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):  # type: ignore[misc]
    def __init__(
        self,
        streams: StreamRegistry,
        upstream: Upstream,
        verifier: TokenVerifier,
        max_message_bytes: int,
    ) -> None:
        self._streams = streams
        self._upstream = upstream
        self._verifier = verifier
        self._max_message_bytes = max_message_bytes

    async def _principal(self, context: grpc.aio.ServicerContext) -> Principal:
        return await self._verifier.verify(bearer_token(context.invocation_metadata()))

    async def Authenticate(
        self, request: gateway_pb2.AuthenticateRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.AuthenticateResponse:
        if not request.api_key:
            raise InvalidArgument("api_key is required")
        token, expires = await self._upstream.authenticate(request.api_key)
        return gateway_pb2.AuthenticateResponse(token=token, expires_at_unix=expires)

    async def EnsureStream(
        self, request: gateway_pb2.EnsureStreamRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.EnsureStreamResponse:
        await self._principal(context)
        wanted = stream_def(request.name, request.config)
        result = await self._streams.ensure(wanted, overwrite=request.overwrite)
        return gateway_pb2.EnsureStreamResponse(
            stream=stream_info(result.stream),
            created=result.created,
            differences=result.differences,
        )

    async def DescribeStream(
        self, request: gateway_pb2.DescribeStreamRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.StreamInfo:
        await self._principal(context)
        return stream_info(await self._streams.describe(request.name, fresh=True))

    async def ListStreams(
        self, request: gateway_pb2.ListStreamsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListStreamsResponse:
        await self._principal(context)
        return gateway_pb2.ListStreamsResponse(
            streams=[stream_info(s) for s in await self._streams.list()]
        )

    async def DeleteStream(
        self, request: gateway_pb2.DeleteStreamRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.DeleteStreamResponse:
        await self._principal(context)
        return gateway_pb2.DeleteStreamResponse(deleted=await self._streams.delete(request.name))

    async def Publish(
        self, request: gateway_pb2.PublishRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PublishResponse:
        await self._principal(context)
        stream = await self._streams.describe(request.stream)
        if request.partition >= stream.partitions:
            raise InvalidArgument(
                f"stream {stream.name!r} has partitions 0-{stream.partitions - 1}, "
                f"not {request.partition}"
            )
        try:
            validate_batch(request.batch.arrow_ipc, request.batch.count, self._max_message_bytes)
        except BatchFormatError as exc:
            raise InvalidArgument(f"malformed batch: {exc}") from None
        base = await self._upstream.append(
            stream.name, request.partition, request.batch.arrow_ipc, request.batch.count
        )
        return gateway_pb2.PublishResponse(
            partition=request.partition, base_offset=base, count=request.batch.count
        )

    async def Consume(
        self,
        request_iterator: AsyncIterator[messages_pb2.ConsumeRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[messages_pb2.ConsumeResponse]:
        await self._principal(context)
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is None or first.WhichOneof("request") != "subscribe":
            raise InvalidArgument("a consume stream must start with subscribe")
        sub = first.subscribe
        check_name("subscription", sub.subscription)
        stream = await self._streams.describe(sub.stream)
        partitions = sorted(set(sub.partitions)) or list(range(stream.partitions))
        outside = [p for p in partitions if p >= stream.partitions]
        if outside:
            raise InvalidArgument(f"stream {stream.name!r} has no partition {outside[0]}")
        fan_out = FanOut(self._upstream, sub)
        try:
            await fan_out.open(partitions)
            reader = asyncio.create_task(_forward_all(requests, fan_out))
            try:
                async for response in until_done(fan_out.responses(), reader):
                    yield response
                await fan_out.finish()
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
        finally:
            await fan_out.close()


async def _forward_all(requests: AsyncIterator[messages_pb2.ConsumeRequest], fan: FanOut) -> None:
    async for request in requests:
        await fan.forward(request)
