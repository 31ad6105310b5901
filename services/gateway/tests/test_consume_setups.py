"""The gateway bounds how many consume sessions open or cancel router streams at once.

10,000 consumers attaching to one subscription made the gateway's
event loop set up thousands of router calls at once, and publishes waited up to
14 s behind them. `Upstream.consume_setups` lets only a few sessions do it at a
time; these tests check the bound holds and that a session cancelled while
waiting its turn to close still cancels its router streams (or the router would
keep the consumer attached).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import cast

from tamto_gateway.consume import FanOut
from tamto_gateway.consume_follow import ConsumeFollower
from tamto_gateway.consume_mux import Muxes
from tamto_gateway.routing import Routes
from tamto_gateway.upstream import Upstream
from tamto_protocol.v1 import messages_pb2
from tamto_testing.waiting import eventually


@dataclass
class Setups:
    """How many router calls are inside their first write, now and at most."""

    released: asyncio.Event = field(default_factory=asyncio.Event)
    now: int = 0
    peak: int = 0
    opened: int = 0


class FakeCall:
    """A router consume call whose subscribe write waits for `Setups.released`."""

    def __init__(self, setups: Setups) -> None:
        self._setups = setups
        self.cancelled = False

    async def write(self, request: messages_pb2.ConsumeRequest) -> None:
        s = self._setups
        s.now += 1
        s.peak = max(s.peak, s.now)
        try:
            await s.released.wait()
        finally:
            s.now -= 1
        s.opened += 1

    def __aiter__(self) -> FakeCall:
        return self

    async def __anext__(self) -> bytes:
        await asyncio.Event().wait()  # no deliveries: the pump waits until cancelled
        raise StopAsyncIteration

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class FakeRoutes:
    async def router_for(self, stream: str, partition: int) -> str:
        return f"router-{partition}" if stream == "two-routers" else "router-0"


class FakeUpstream:
    """Router calls of router-0 wait for `setups.released`; other routers' answer at once."""

    def __init__(self, setups: Setups, limit: int) -> None:
        self.routes = FakeRoutes()
        self.follower = ConsumeFollower(cast(Routes, self.routes), Muxes(1.0))
        self.limit = limit
        self.gates: dict[str, asyncio.Semaphore] = {}
        self.calls: list[FakeCall] = []
        self._setups = setups
        self._answering = Setups()
        self._answering.released.set()

    @property
    def gate(self) -> asyncio.Semaphore:
        return self.consume_setups("router-0")

    def consume_setups(self, address: str) -> asyncio.Semaphore:
        return self.gates.setdefault(address, asyncio.Semaphore(self.limit))

    async def router_consume(self, address: str) -> FakeCall:
        call = FakeCall(self._setups if address == "router-0" else self._answering)
        self.calls.append(call)
        return call


def fan_out(upstream: FakeUpstream, stream: str = "s") -> FanOut:
    subscribe = messages_pb2.Subscribe(stream=stream, subscription="crowd")
    return FanOut(cast(Upstream, upstream), subscribe)


async def test_only_consume_setups_sessions_open_router_streams_at_once() -> None:
    setups = Setups()
    upstream = FakeUpstream(setups, limit=4)
    sessions = [fan_out(upstream) for _ in range(50)]
    opening = [asyncio.create_task(s.open([0, 1, 2, 3])) for s in sessions]
    await eventually(lambda: setups.now == 4, 10, "four setups under way")
    for _ in range(20):  # the others stay queued however long the first take
        await asyncio.sleep(0)
    assert setups.now == 4
    setups.released.set()
    await asyncio.wait_for(asyncio.gather(*opening), 10)
    assert setups.opened == 50, "every session opened once its turn came"
    assert setups.peak == 4
    for s in sessions:
        await s.close()
    assert all(call.cancelled for call in upstream.calls)


async def test_a_session_cancelled_while_waiting_to_close_still_cancels_its_router_streams() -> (
    None
):
    setups = Setups()
    setups.released.set()
    upstream = FakeUpstream(setups, limit=1)
    session = fan_out(upstream)
    await session.open([0])
    await upstream.gate.acquire()  # another session is setting up
    closing = asyncio.create_task(session.close())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not upstream.calls[0].cancelled, "close waits its turn"
    closing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await closing
    assert upstream.calls[0].cancelled, "the router stream was left open"
    upstream.gate.release()


async def test_a_router_slow_to_answer_delays_no_other_routers_consumers() -> None:
    setups = Setups()  # router-0 does not answer until released
    upstream = FakeUpstream(setups, limit=1)
    stuck = asyncio.create_task(fan_out(upstream).open([0]))
    await eventually(lambda: setups.now == 1, 10, "router-0's setup under way")
    other = fan_out(upstream, "two-routers")
    await asyncio.wait_for(other.open([1]), 10)  # router-1 only: not behind router-0
    setups.released.set()
    await asyncio.wait_for(stuck, 10)
