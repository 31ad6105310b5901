"""At most `--consume-setup-slots` client consume streams are set up (or torn
down) at once.

gRPC's Python server takes one new call per event-loop round: while a crowd of
10,000 attached, every setup step of every accepted stream shared the round, the
rounds grew long, and a publish arriving then waited behind the crowd's setups
(`tests/e2e/test_crowd.py`). The streams beyond the slots wait their turn
before their first step (authentication), and a slot is freed when a setup ends,
also when it fails. A stream waits for its client's subscribe within its turn
only briefly: an idle client gives its turn up. The same holds for a crowd leaving at once: each stream's
teardown takes its turn, and is done even if the wait for its turn is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from tamto_common.errors import Unauthenticated
from tamto_gateway import grpc_api
from tamto_gateway.grpc_api import GatewayServicer
from tamto_protocol.v1 import messages_pb2


class HeldGuard:
    """Authenticates nobody: each caller waits until released, then is refused."""

    def __init__(self) -> None:
        self.entered = 0
        self.release = asyncio.Event()

    async def principal(self, metadata: object, peer: str, action: str) -> object:
        self.entered += 1
        await self.release.wait()
        raise Unauthenticated("held guard")


class Context:
    def invocation_metadata(self) -> tuple[()]:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


async def no_requests() -> AsyncIterator[messages_pb2.ConsumeRequest]:
    return
    yield


async def consume(servicer: GatewayServicer) -> None:
    async for _ in servicer.Consume(no_requests(), cast(Any, Context())):
        pass


async def test_streams_beyond_the_slots_wait_before_authenticating() -> None:
    guard = HeldGuard()
    none = cast(Any, None)
    servicer = GatewayServicer(none, none, cast(Any, guard), none, 1024, none, none, 3)
    streams = [asyncio.create_task(consume(servicer)) for _ in range(10)]
    for _ in range(20):  # every stream gets as far as it can
        await asyncio.sleep(0)
    assert guard.entered == 3, "three slots: three streams authenticate, seven wait"
    guard.release.set()  # each setup fails: its slot goes to the next stream
    results = await asyncio.wait_for(asyncio.gather(*streams, return_exceptions=True), 10)
    assert guard.entered == 10
    assert all(isinstance(r, Unauthenticated) for r in results), results


class FakeFanOut:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


async def test_a_teardown_waits_its_turn_and_is_done_even_if_that_wait_is_cancelled() -> None:
    none = cast(Any, None)
    servicer = GatewayServicer(none, none, none, none, 1024, none, none, 1)
    peer = "ipv4:127.0.0.1:1"
    reader = asyncio.create_task(asyncio.sleep(0))
    await servicer._consume_setups.acquire()  # a setup holds the only slot
    waiting, cancelled = FakeFanOut(), FakeFanOut()
    for _ in range(2):
        servicer.consumers_per_connection.enter(peer)
    closing = asyncio.create_task(servicer._close_consume(cast(Any, waiting), reader, peer))
    abandoned = asyncio.create_task(servicer._close_consume(cast(Any, cancelled), reader, peer))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.closed, "it waits for the slot"
    assert not cancelled.closed, "it waits for the slot"
    abandoned.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await abandoned
    assert cancelled.closed, "a teardown whose wait was cancelled is still done"
    servicer._consume_setups.release()
    await asyncio.wait_for(closing, 10)
    assert waiting.closed
    assert servicer._consume_setups.locked() is False, "every slot given back"
    servicer.consumers_per_connection.limit = 1
    servicer.consumers_per_connection.enter(peer)  # both left: one stream fits a limit of one


class AdmittingGuard:
    """Authenticates everyone; each authorization waits until released, then is refused."""

    def __init__(self) -> None:
        self.authorizing = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def principal(self, metadata: object, peer: str, action: str) -> object:
        return object()

    async def require(self, *args: object) -> None:
        self.authorizing += 1
        self.entered.set()
        await self.release.wait()
        raise Unauthenticated("held guard")


async def silent() -> AsyncIterator[messages_pb2.ConsumeRequest]:
    await asyncio.Event().wait()  # never sends its subscribe
    yield messages_pb2.ConsumeRequest()


async def subscribing() -> AsyncIterator[messages_pb2.ConsumeRequest]:
    subscribe = messages_pb2.Subscribe(stream="orders", subscription="s")
    yield messages_pb2.ConsumeRequest(subscribe=subscribe)
    await asyncio.Event().wait()


async def test_a_client_that_never_subscribes_gives_its_turn_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(grpc_api, "SUBSCRIBE_IN_TURN_S", 0.05)
    # The refused stream's client never half-closes: its refusal ends it at once.
    monkeypatch.setattr(grpc_api, "REFUSED_END_WAIT_S", 0.05)
    guard = AdmittingGuard()
    none = cast(Any, None)
    servicer = GatewayServicer(none, none, cast(Any, guard), none, 1024, none, none, 1)

    async def consume_from(requests: AsyncIterator[messages_pb2.ConsumeRequest]) -> None:
        async for _ in servicer.Consume(requests, cast(Any, Context())):
            pass

    idle = asyncio.create_task(consume_from(silent()))
    for _ in range(10):
        await asyncio.sleep(0)
    active = asyncio.create_task(consume_from(subscribing()))
    await asyncio.wait_for(guard.entered.wait(), 10)  # the idle stream gave its turn up
    assert guard.authorizing == 1
    assert not idle.done(), "the idle stream still waits for its subscribe"
    guard.release.set()
    with contextlib.suppress(Unauthenticated):
        await asyncio.wait_for(active, 10)
    idle.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await idle
