"""The gateway's consume mux: its sessions with a router on one stream.

Against a scripted router (a real gRPC server answering `ConsumeMux` as the
test says): sessions share one stream and each gets its own responses, one
session nobody reads does not stall another, a session's end carries its status,
`cancel` reaches the router, the stream failing ends every session UNAVAILABLE
naming the router (and the next session opens a new stream), and a router
without `ConsumeMux` gets a `Consume` stream per session. A `FanOut` listens to
its mux sessions: their responses and ends reach it with no task per session.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import cast

import grpc
import pytest
from prometheus_client import REGISTRY

from tamto_common.channels import peer_channel
from tamto_common.errors import InvalidArgument, TamtoError, Unavailable
from tamto_gateway.consume import FanOut
from tamto_gateway.consume_follow import ConsumeFollower
from tamto_gateway.consume_mux import Mux, Muxes, MuxSession
from tamto_gateway.routing import Routes
from tamto_gateway.upstream import Upstream
from tamto_protocol.delivery_wire import (
    consume_delivery,
    mux_end,
    mux_responses,
    parse_consume_response,
)
from tamto_protocol.pipelined import STREAM_RETRY_S
from tamto_protocol.v1 import messages_pb2, router_pb2
from tamto_testing.grpc_servers import listen
from tamto_testing.waiting import eventually


@dataclass
class Router:
    """A router's `ConsumeMux` run by the test: what it received, per stream, and
    what to send (`send`, or `fail` to end the stream with an error)."""

    streams: int = 0
    peers: list[str] = field(default_factory=list)  # each stream's client address
    received: list[router_pb2.ConsumeMuxRequest] = field(default_factory=list)
    outgoing: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)

    async def consume_mux(
        self,
        requests: AsyncIterator[router_pb2.ConsumeMuxRequests],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[bytes]:
        self.streams += 1
        self.peers.append(context.peer())
        await context.send_initial_metadata(())

        async def read() -> None:
            async for batch in requests:
                self.received.extend(batch.requests)

        reader = asyncio.create_task(read())
        try:
            while (response := await self.outgoing.get()) is not None:
                yield response
            await context.abort(grpc.StatusCode.INTERNAL, "router fell over")
        finally:
            reader.cancel()

    def send(self, *responses: bytes) -> None:
        """Send `responses` in one message."""
        self.outgoing.put_nowait(mux_responses(responses))

    def fail(self) -> None:
        self.outgoing.put_nowait(None)

    def sessions_subscribed(self) -> list[int]:
        return [
            r.session
            for r in self.received
            if r.WhichOneof("request") == "consume"
            and r.consume.WhichOneof("request") == "subscribe"
        ]


def delivery(session: int, base_offset: int) -> bytes:
    return consume_delivery("s", 0, base_offset, 1, 0, b"arrow", 1, (), session)


async def serve(router: Router | None) -> tuple[grpc.aio.Server, str]:
    """A gRPC server with the router's `ConsumeMux` (None: without that method)."""
    server = grpc.aio.server()
    if router is not None:
        handler = grpc.stream_stream_rpc_method_handler(
            router.consume_mux,
            request_deserializer=router_pb2.ConsumeMuxRequests.FromString,
            response_serializer=None,
        )
        server.add_registered_method_handlers("tamto.v1.Router", {"ConsumeMux": handler})
    port = listen(server)
    await server.start()
    return server, f"127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def connected(
    router: Router | None, clock: Callable[[], float] = time.monotonic
) -> AsyncIterator[tuple[str, grpc.aio.Channel, Muxes]]:
    """(address, channel, muxes) of a gateway's view of a served `router`."""
    server, address = await serve(router)
    channel = peer_channel(address)
    muxes = Muxes(10.0, clock)
    try:
        yield address, channel, muxes
    finally:
        await muxes.close()
        await channel.close()
        await server.stop(None)


async def subscribe(session: MuxSession) -> None:
    await session.write(messages_pb2.ConsumeRequest(subscribe=messages_pb2.Subscribe(stream="s")))


@dataclass
class Heard:
    """A session and, in order, what it handed its listener (this one): responses,
    then its end (None: a clean end)."""

    session: MuxSession
    items: asyncio.Queue[bytes | TamtoError | None] = field(default_factory=asyncio.Queue)

    @property
    def id(self) -> int:
        return self.session.id

    def on_response(self, response: bytes) -> None:
        self.items.put_nowait(response)

    def on_end(self, error: TamtoError | None) -> None:
        self.items.put_nowait(error)


def heard(mux: Mux) -> Heard:
    """A new session of `mux`, listened to by a `Heard`."""
    listener = Heard(mux.session())
    listener.session.listen(listener)
    return listener


async def next_offset(heard: Heard) -> int:
    data = await asyncio.wait_for(heard.items.get(), 10)
    assert isinstance(data, bytes), f"the session ended: {data!r}"
    view = parse_consume_response(data)
    assert view is not None
    return view.batch.base_offset


async def responses_then_end(heard: Heard) -> tuple[list[bytes], TamtoError | None]:
    responses = []
    async with asyncio.timeout(10):
        while isinstance(item := await heard.items.get(), bytes):
            responses.append(item)
    return responses, item


async def ended_with(heard: Heard) -> TamtoError:
    _, end = await responses_then_end(heard)
    assert isinstance(end, TamtoError), "the session ended cleanly"
    return end


async def test_sessions_share_one_stream_and_each_reads_its_own_responses() -> None:
    router = Router()
    async with connected(router) as (address, channel, muxes):
        sessions = []
        for _ in range(3):
            mux = await muxes.get(address, channel)
            assert mux is not None
            sessions.append(heard(mux))
        for s in sessions:
            await subscribe(s.session)
        await eventually(lambda: len(router.sessions_subscribed()) == 3, 10, "three subscribes")
        assert router.streams == 1
        assert muxes.sessions() == {address: 3}
        gauge = REGISTRY.get_sample_value("tamto_gateway_consume_mux_sessions", {"router": address})
        assert gauge == 3
        ids = [s.id for s in sessions]
        assert router.sessions_subscribed() == ids
        router.send(*[delivery(sid, offset) for offset, sid in enumerate(reversed(ids))])
        assert [await next_offset(s) for s in sessions] == [2, 1, 0]


async def test_a_session_nobody_reads_does_not_stall_another() -> None:
    router = Router()
    async with connected(router) as (address, channel, muxes):
        mux = await muxes.get(address, channel)
        assert mux is not None
        idle, busy = heard(mux), heard(mux)
        for offset in range(500):
            router.send(delivery(idle.id, offset))
        router.send(delivery(busy.id, 7))
        assert await next_offset(busy) == 7
        assert await next_offset(idle) == 0, "the idle one's responses wait for it"


async def test_a_sessions_end_carries_its_status_and_cancel_reaches_the_router() -> None:
    router = Router()
    async with connected(router) as (address, channel, muxes):
        mux = await muxes.get(address, channel)
        assert mux is not None
        erring, clean, cancelled = heard(mux), heard(mux), heard(mux)
        router.send(mux_end(erring.id, grpc.StatusCode.INVALID_ARGUMENT.value[0], "bad ack"))
        router.send(mux_end(clean.id, 0, ""))
        error = await ended_with(erring)
        assert isinstance(error, InvalidArgument)
        assert str(error) == "bad ack"  # the router's words; its address is not the client's
        assert await responses_then_end(clean) == ([], None)
        with pytest.raises(asyncio.InvalidStateError):
            await subscribe(clean.session)  # as a call's write after its end
        assert cancelled.session.cancel()
        await eventually(
            lambda: any(r.session == cancelled.id and r.cancel for r in router.received),
            10,
            "the router told of the cancel",
        )
        assert mux.sessions == 0


async def test_the_stream_failing_ends_every_session_unavailable_and_the_next_opens_anew() -> None:
    router = Router()
    async with connected(router) as (address, channel, muxes):
        mux = await muxes.get(address, channel)
        assert mux is not None
        sessions = [heard(mux) for _ in range(3)]
        router.fail()
        for s in sessions:
            error = await ended_with(s)
            assert isinstance(error, Unavailable)
            assert address not in str(error)
            assert "router fell over" in str(error)
        again = await muxes.get(address, channel)
        assert again is not None
        assert again is not mux
        assert router.streams == 2
        fresh = again.session()
        await subscribe(fresh)
        await eventually(lambda: fresh.id in router.sessions_subscribed(), 10, "a new session")


async def test_the_mux_has_a_connection_of_its_own() -> None:
    """Apart from the gateway's channel to the router, which its appends take."""
    router = Router()
    async with connected(router) as (address, channel, muxes):
        assert await muxes.get(address, channel) is not None
        beside = channel.stream_stream("/tamto.v1.Router/ConsumeMux")()
        try:
            await eventually(lambda: router.streams == 2, 10, "a stream on the shared channel")
            assert router.peers[0] != router.peers[1], "the mux shares the appends' connection"
        finally:
            beside.cancel()


async def test_a_router_without_consume_mux_is_asked_again_only_after_a_while() -> None:
    now = [0.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    async with connected(None, clock) as (address, channel, muxes):
        assert await muxes.get(address, channel) is None
        now[0] += STREAM_RETRY_S - 1
        assert await muxes.get(address, channel) is None
        now[0] += 2
        assert await muxes.get(address, channel) is None  # asked again: still none


async def test_sessions_waiting_behind_a_failed_open_fail_with_it_at_once() -> None:
    server, address = await serve(Router())
    await server.stop(None)  # nobody answers there any more
    channel = peer_channel(address)
    now = [0.0]
    muxes = Muxes(10.0, lambda: now[0])
    try:
        with pytest.raises(Unavailable) as first:
            await muxes.get(address, channel)
        with pytest.raises(Unavailable) as second:
            await muxes.get(address, channel)
        assert second.value is first.value, "the second did not try again"
        now[0] += 2
        with pytest.raises(Unavailable) as third:
            await muxes.get(address, channel)
        assert third.value is not first.value, "tried again a while later"
    finally:
        await muxes.close()
        await channel.close()


@dataclass
class MuxUpstream:
    """The part of `Upstream` a `FanOut` uses, with every session on the real mux."""

    address: str
    channel: grpc.aio.Channel
    muxes: Muxes

    def __post_init__(self) -> None:
        self.follower = ConsumeFollower(cast(Routes, self), self.muxes)

    @property
    def routes(self) -> MuxUpstream:
        return self  # every partition on this one router

    async def router_for(self, stream: str, partition: int) -> str:
        return self.address

    def consume_setups(self, address: str) -> asyncio.Semaphore:
        return asyncio.Semaphore(1)

    async def router_consume(self, address: str) -> MuxSession:
        mux = await self.muxes.get(address, self.channel)
        assert mux is not None
        return mux.session()


async def test_a_fan_out_listens_to_its_mux_sessions_without_a_task_of_its_own() -> None:
    router = Router()
    async with connected(router) as (address, channel, muxes):
        upstream = cast(Upstream, MuxUpstream(address, channel, muxes))
        await muxes.get(address, channel)  # the mux's own two tasks are there before
        tasks = len(asyncio.all_tasks())
        fans = [FanOut(upstream, messages_pb2.Subscribe(stream="s")) for _ in range(20)]
        for fan in fans:
            await fan.open([0, 1])
        assert len(asyncio.all_tasks()) == tasks, "a task per consume session"
        await eventually(lambda: len(router.sessions_subscribed()) == 20, 10, "20 subscribes")
        ids = router.sessions_subscribed()
        router.send(*[delivery(sid, n) for n, sid in enumerate(ids)])
        for n, fan in enumerate(fans):
            response = await asyncio.wait_for(anext(fan.responses()), 10)
            view = parse_consume_response(response)
            assert view is not None
            assert view.batch.base_offset == n

        router.send(mux_end(ids[0], grpc.StatusCode.INVALID_ARGUMENT.value[0], "bad ack"))
        with pytest.raises(InvalidArgument, match=r"^bad ack$"):
            await asyncio.wait_for(anext(fans[0].responses()), 10)

        finishing = asyncio.create_task(fans[1].finish())
        await eventually(
            lambda: any(r.session == ids[1] and r.end for r in router.received),
            10,
            "the session's end sent to the router",
        )
        assert not finishing.done(), "finish did not wait for the router to end the session"
        router.send(mux_end(ids[1], 0, ""))
        await asyncio.wait_for(finishing, 10)

        for fan in fans[2:]:
            await fan.close()
        await eventually(
            lambda: sum(bool(r.cancel) for r in router.received) == 18, 10, "18 cancels"
        )
        assert muxes.sessions() == {address: 0}


async def test_a_closed_fan_out_is_freed_without_waiting_for_a_collection() -> None:
    """Its sessions let go of their listener when they end: no reference cycle keeps
    10,000 departed consumers' fan-outs until the next full collection."""
    router = Router()
    async with connected(router) as (address, channel, muxes):
        upstream = cast(Upstream, MuxUpstream(address, channel, muxes))
        fan = FanOut(upstream, messages_pb2.Subscribe(stream="s"))
        await fan.open([0])
        freed = weakref.ref(fan)
        gc.disable()
        try:
            await fan.close()
            del fan
            assert freed() is None, "the closed fan-out is still held"
        finally:
            gc.enable()


async def test_sessions_follow_their_partitions_owners() -> None:
    """A session whose partition is another router's now ends UNAVAILABLE ("moved"),
    one reading only partitions that stayed goes on, and the mux to a router gone
    from the directory is closed, ending its sessions: a router cut off by the
    network ends nothing itself (`tamto_gateway.consume_follow`)."""
    router = Router()
    async with connected(router) as (address, channel, muxes):
        upstream = MuxUpstream(address, channel, muxes)
        moving = FanOut(cast(Upstream, upstream), messages_pb2.Subscribe(stream="s"))
        staying = FanOut(cast(Upstream, upstream), messages_pb2.Subscribe(stream="s"))
        await moving.open([0, 1])
        await staying.open([0])
        owners = {0: address, 1: "elsewhere:1"}
        for fan in (moving, staying):
            fan.follow(lambda _stream, partition: owners[partition])
        with pytest.raises(Unavailable, match="partition s/1 moved"):
            await asyncio.wait_for(anext(moving.responses()), 10)
        await eventually(lambda: len(router.sessions_subscribed()) == 2, 10, "2 subscribes")
        router.send(delivery(router.sessions_subscribed()[1], 7))
        view = parse_consume_response(await asyncio.wait_for(anext(staying.responses()), 10))
        assert view is not None
        assert view.batch.base_offset == 7

        await muxes.close_all_but({"another:1"})
        with pytest.raises(Unavailable, match="its router left the directory"):
            await asyncio.wait_for(anext(staying.responses()), 10)
        assert muxes.sessions() == {}
        for fan in (moving, staying):
            await fan.close()
