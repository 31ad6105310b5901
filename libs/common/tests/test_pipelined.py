"""Unary calls pipelined on one stream: a real grpc.aio server and channel in-process."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from tamto_common.channels import peer_channel
from tamto_common.errors import FailedPrecondition
from tamto_common.grpc_errors import TranslateErrorsInterceptor
from tamto_common.pipelined import answer_calls
from tamto_local.ports import free_port
from tamto_protocol.pipelined import STREAM_RETRY_S, PipelinedCalls
from tamto_protocol.v1 import router_pb2
from tamto_protocol.wire import router_append_request
from tamto_testing.grpc_servers import listen
from tamto_testing.waiting import eventually

METHOD = "/tamto.v1.Router/AppendStream"

Handle = Callable[[router_pb2.RouterAppendRequest], Awaitable[router_pb2.RouterAppendResponse]]


class Server:
    """A server whose AppendStream answers with `handle`; records each stream's metadata."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.stream_metadata: list[dict[str, str]] = []
        self.server = grpc.aio.server(interceptors=[TranslateErrorsInterceptor()])
        self.port = 0

    async def _stream(
        self,
        requests: AsyncIterator[router_pb2.RouterAppendRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[router_pb2.RouterAppendStreamResponse]:
        self.stream_metadata.append({k: str(v) for k, v in (context.invocation_metadata() or ())})
        async for answer in answer_calls(
            requests, self.handle, router_pb2.RouterAppendStreamResponse, METHOD
        ):
            yield answer

    async def start(self, port: int = 0) -> None:
        handler = grpc.stream_stream_rpc_method_handler(
            self._stream,
            request_deserializer=router_pb2.RouterAppendRequest.FromString,
            response_serializer=router_pb2.RouterAppendStreamResponse.SerializeToString,
        )
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("tamto.v1.Router", {"AppendStream": handler}),)
        )
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop(None)


async def echo_partition(
    request: router_pb2.RouterAppendRequest,
) -> router_pb2.RouterAppendResponse:
    return router_pb2.RouterAppendResponse(base_offset=request.partition, count=request.batch.count)


def request(partition: int) -> Callable[[int], bytes]:
    return lambda call_id: router_append_request("s", partition, b"x", 1, call_id)


@pytest.fixture
async def channel_to() -> AsyncIterator[Callable[[Server], grpc.aio.Channel]]:
    channels: list[grpc.aio.Channel] = []

    def open_channel(server: Server) -> grpc.aio.Channel:
        # The services' channel options: a reconnect to a restarted peer within a
        # second, not gRPC's default backoff (seconds and growing, under load).
        channels.append(peer_channel(f"127.0.0.1:{server.port}"))
        return channels[-1]

    yield open_channel
    for channel in channels:
        await channel.close()


async def test_concurrent_calls_get_their_own_answers_in_any_order(
    channel_to: Callable[[Server], grpc.aio.Channel],
) -> None:
    gates = {p: asyncio.Event() for p in range(5)}

    async def gated(r: router_pb2.RouterAppendRequest) -> router_pb2.RouterAppendResponse:
        await gates[r.partition].wait()
        return await echo_partition(r)

    server = Server(gated)
    await server.start()
    calls = PipelinedCalls(channel_to(server), METHOD, router_pb2.RouterAppendStreamResponse)
    try:
        tasks = [asyncio.create_task(calls(request(p), timeout=10)) for p in range(5)]
        for p in reversed(range(5)):  # the last call is answered first
            gates[p].set()
            answer = await tasks[p]
            assert answer.base_offset == p
            assert all(not t.done() for t in tasks[:p])
        assert len(server.stream_metadata) == 1  # all on one stream
    finally:
        await calls.close()
        await server.stop()


async def test_errors_come_back_as_the_status_a_unary_call_would_end_with(
    channel_to: Callable[[Server], grpc.aio.Channel],
) -> None:
    async def failing(r: router_pb2.RouterAppendRequest) -> router_pb2.RouterAppendResponse:
        if r.partition == 1:
            raise FailedPrecondition("not the owner of s/1")
        if r.partition == 2:
            raise RuntimeError("a bug with secrets")
        return await echo_partition(r)

    server = Server(failing)
    await server.start()
    calls = PipelinedCalls(channel_to(server), METHOD, router_pb2.RouterAppendStreamResponse)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await calls(request(1), timeout=10)
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert refused.value.details() == "not the owner of s/1"
        with pytest.raises(grpc.aio.AioRpcError) as bug:
            await calls(request(2), timeout=10)
        assert bug.value.code() is grpc.StatusCode.INTERNAL
        assert bug.value.details() == "internal error"
        assert (await calls(request(3), timeout=10)).base_offset == 3  # the stream lives on
        assert len(server.stream_metadata) == 1
    finally:
        await calls.close()
        await server.stop()


async def test_a_call_times_out_alone(channel_to: Callable[[Server], grpc.aio.Channel]) -> None:
    never = asyncio.Event()

    async def stuck(r: router_pb2.RouterAppendRequest) -> router_pb2.RouterAppendResponse:
        if r.partition == 0:
            await never.wait()
        return await echo_partition(r)

    server = Server(stuck)
    await server.start()
    calls = PipelinedCalls(channel_to(server), METHOD, router_pb2.RouterAppendStreamResponse)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await calls(request(0), timeout=0.2)
        assert late.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert (await calls(request(4), timeout=10)).base_offset == 4
    finally:
        await calls.close()
        await server.stop()


async def test_a_lost_server_fails_waiting_calls_and_a_new_stream_serves_later_ones(
    channel_to: Callable[[Server], grpc.aio.Channel],
) -> None:
    entered = asyncio.Event()
    never = asyncio.Event()

    async def stuck(r: router_pb2.RouterAppendRequest) -> router_pb2.RouterAppendResponse:
        if r.partition == 0:
            entered.set()
            await never.wait()
        return await echo_partition(r)

    server = Server(stuck)
    await server.start()
    channel = channel_to(server)
    calls = PipelinedCalls(channel, METHOD, router_pb2.RouterAppendStreamResponse)
    try:
        waiting = asyncio.create_task(calls(request(0), timeout=30))
        await entered.wait()
        await server.stop()
        with pytest.raises(grpc.aio.AioRpcError) as lost:
            await waiting
        assert lost.value.code() is grpc.StatusCode.UNAVAILABLE
        again = Server(echo_partition)
        await again.start(server.port)
        try:
            codes = []
            async with asyncio.timeout(20):
                while True:  # the channel reconnects with backoff
                    try:
                        answer = await calls(request(7), timeout=5)
                        break
                    except grpc.aio.AioRpcError as exc:
                        codes.append(exc.code())
            assert answer.base_offset == 7
            assert set(codes) <= {grpc.StatusCode.UNAVAILABLE}
            assert len(again.stream_metadata) == 1
        finally:
            await again.stop()
    finally:
        await calls.close()


async def test_new_metadata_opens_a_new_stream_and_the_old_one_finishes(
    channel_to: Callable[[Server], grpc.aio.Channel],
) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def gated(r: router_pb2.RouterAppendRequest) -> router_pb2.RouterAppendResponse:
        if r.partition == 0:
            entered.set()
            await gate.wait()
        return await echo_partition(r)

    server = Server(gated)
    await server.start()
    calls = PipelinedCalls(channel_to(server), METHOD, router_pb2.RouterAppendStreamResponse)
    try:
        old = asyncio.create_task(calls(request(0), timeout=10, metadata=[("token", "a")]))
        await entered.wait()
        assert (await calls(request(1), timeout=10, metadata=[("token", "b")])).base_offset == 1
        assert [m["token"] for m in server.stream_metadata] == ["a", "b"]
        gate.set()
        assert (await old).base_offset == 0  # answered on the half-closed old stream
    finally:
        await calls.close()
        await server.stop()


async def test_a_request_without_call_id_ends_the_stream_with_invalid_argument(
    channel_to: Callable[[Server], grpc.aio.Channel],
) -> None:
    server = Server(echo_partition)
    await server.start()
    open_stream = channel_to(server).stream_stream(
        METHOD,
        request_serializer=None,
        response_deserializer=router_pb2.RouterAppendStreamResponse.FromString,
    )
    try:
        call = open_stream()
        await call.write(router_append_request("s", 0, b"x", 1))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call.read()
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "call_id" in (refused.value.details() or "")
    finally:
        await server.stop()


async def test_close_fails_waiting_calls_and_refuses_new_ones(
    channel_to: Callable[[Server], grpc.aio.Channel],
) -> None:
    entered = asyncio.Event()

    async def stuck(r: router_pb2.RouterAppendRequest) -> router_pb2.RouterAppendResponse:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    server = Server(stuck)
    await server.start()
    calls = PipelinedCalls(channel_to(server), METHOD, router_pb2.RouterAppendStreamResponse)
    try:
        waiting = asyncio.create_task(calls(request(0), timeout=30))
        await entered.wait()
        await calls.close()
        with pytest.raises(grpc.aio.AioRpcError) as closed:
            await waiting
        assert closed.value.code() is grpc.StatusCode.CANCELLED
        with pytest.raises(grpc.aio.AioRpcError):
            await calls(request(1), timeout=1)
    finally:
        await server.stop()


async def test_a_peer_without_the_stream_method_is_called_unary(
    channel_to: Callable[[Server], grpc.aio.Channel],
) -> None:
    unary_calls: list[int] = []

    async def append(
        request: router_pb2.RouterAppendRequest, context: grpc.aio.ServicerContext
    ) -> router_pb2.RouterAppendResponse:
        unary_calls.append(request.partition)
        return await echo_partition(request)

    old = Server(echo_partition)  # only its handlers below: no AppendStream
    old.server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "tamto.v1.Router",
                {
                    "Append": grpc.unary_unary_rpc_method_handler(
                        append,
                        request_deserializer=router_pb2.RouterAppendRequest.FromString,
                        response_serializer=router_pb2.RouterAppendResponse.SerializeToString,
                    )
                },
            ),
        )
    )
    old.port = listen(old.server)
    await old.server.start()
    now = [0.0]
    calls = PipelinedCalls(
        channel_to(old),
        METHOD,
        router_pb2.RouterAppendStreamResponse,
        fallback=("/tamto.v1.Router/Append", router_pb2.RouterAppendResponse),
        clock=lambda: now[0],
    )
    new = Server(echo_partition)
    try:
        assert (await calls(request(3), timeout=10)).base_offset == 3
        assert (await calls(request(4), timeout=10)).base_offset == 4
        assert unary_calls == [3, 4]
        # The peer is upgraded in place: same address, now with the stream.
        await old.stop()
        await new.start(old.port)
        now[0] = STREAM_RETRY_S  # the stream is tried again only after a while

        async def answered() -> bool:
            try:
                assert (await calls(request(5), timeout=10)).base_offset == 5
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise
                return False  # the channel reconnects to the new server with its own backoff
            return True

        await eventually(answered, 20, "the channel reconnected to the upgraded peer")
        assert len(new.stream_metadata) == 1, "called over the stream again"
        assert unary_calls == [3, 4]
    finally:
        await calls.close()
        await new.stop()
        await old.stop()


async def test_a_peer_that_is_gone_fails_each_call_and_leaves_no_unretrieved_error() -> None:
    reported: list[str] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda _loop, context: reported.append(str(context.get("message")))
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{free_port('127.0.0.1')}")
    calls = PipelinedCalls(channel, METHOD, router_pb2.RouterAppendStreamResponse)
    try:
        for partition in range(3):
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await calls(request(partition), timeout=10)
            assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await calls.close()
        await channel.close()
    gc.collect()  # a future whose exception nobody took is reported when collected
    assert reported == []
