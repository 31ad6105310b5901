"""Several request/reply calls per stream message, both ways, between a real
grpc.aio server running the gateway's stream method (`ephemeral_api._pipelined`)
and `tamto_protocol.pipelined.PipelinedCalls`; and either side alone, as a peer
from before, falling back to one call per message."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tamto_gateway.ephemeral_api import _pipelined
from tamto_protocol.pipelined import PipelinedCalls
from tamto_protocol.v1 import gateway_pb2
from tamto_protocol.wire import REQUEST, REQUEST_STREAM
from tamto_testing.grpc_servers import listen
from tamto_testing.waiting import eventually


class Counted:
    """The server's view: stream messages read, calls answered."""

    def __init__(self) -> None:
        self.messages = 0
        self.calls = 0
        self.release = asyncio.Event()


async def answer(counted: Counted, request: Any, context: Any) -> Any:
    counted.calls += 1
    await counted.release.wait()
    return gateway_pb2.RequestResponse(response_stream=f"r{request.timeout_ms}")


async def serve(several: bool, counted: Counted) -> tuple[grpc.aio.Server, int]:
    method = _pipelined(
        lambda _self, request, context: answer(counted, request, context),
        gateway_pb2.RequestStreamResponse,
        REQUEST,
        several,
    )

    async def behaviour(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        async def counting() -> AsyncIterator[Any]:
            async for request in requests:
                counted.messages += 1
                yield request

        async for response in method(None, counting(), context):
            yield response

    handler = grpc.stream_stream_rpc_method_handler(
        behaviour,
        request_deserializer=gateway_pb2.RequestRequest.FromString,
        response_serializer=gateway_pb2.RequestStreamResponse.SerializeToString,
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("tamto.v1.Gateway", {"RequestStream": handler}),)
    )
    port = listen(server)
    await server.start()
    return server, port


def encoded(number: int, call_id: int) -> bytes:
    return bytes(gateway_pb2.RequestRequest(timeout_ms=number, call_id=call_id).SerializeToString())


@pytest.mark.parametrize(("server_several", "client_several"), [(1, 1), (0, 1), (1, 0)])
async def test_calls_made_together_share_messages_when_both_sides_can(
    server_several: int, client_several: int
) -> None:
    counted = Counted()
    server, port = await serve(bool(server_several), counted)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    calls = PipelinedCalls(
        channel,
        REQUEST_STREAM,
        gateway_pb2.RequestStreamResponse,
        more_calls=16 if client_several else 0,
    )
    try:
        counted.release.set()
        first = await calls(functools.partial(encoded, 1000))  # opens the stream
        assert first.response_stream == "r1000"
        counted.release.clear()
        asking = [asyncio.create_task(calls(functools.partial(encoded, n))) for n in range(100)]
        # Every call is written and taken by the server while none is answered.
        await eventually(lambda: counted.calls == 101, 10, "the server has every call")
        counted.release.set()
        answers = await asyncio.gather(*asking)
        assert [a.response_stream for a in answers] == [f"r{n}" for n in range(100)]
        if server_several and client_several:
            assert calls.messages_written < 20, calls.messages_written
            assert counted.messages == calls.messages_written
        else:
            assert calls.messages_written == 101
            assert counted.messages == 101
    finally:
        await calls.close()
        await channel.close()
        await server.stop(None)


async def test_calls_made_in_one_turn_of_the_loop_go_in_one_message() -> None:
    """Requests woken together (by one answer message) are written together: none goes
    out alone ahead of the others."""
    counted = Counted()
    counted.release.set()
    server, port = await serve(True, counted)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    calls = PipelinedCalls(
        channel, REQUEST_STREAM, gateway_pb2.RequestStreamResponse, more_calls=16
    )
    try:
        await calls(functools.partial(encoded, 1000))  # opens the stream
        before = calls.messages_written
        answers = await asyncio.gather(*(calls(functools.partial(encoded, n)) for n in range(10)))
        assert [a.response_stream for a in answers] == [f"r{n}" for n in range(10)]
        assert calls.messages_written - before == 1
        assert counted.messages == calls.messages_written
    finally:
        await calls.close()
        await channel.close()
        await server.stop(None)
