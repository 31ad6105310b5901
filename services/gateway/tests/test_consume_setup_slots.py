"""At most `--consume-setup-slots` client consume streams are set up at once.

gRPC's Python server takes one new call per event-loop round: while a crowd of
10,000 attached, every setup step of every accepted stream shared the round, the
rounds grew long, and a publish arriving then waited behind the crowd's setups
(issue 17; docs/testing.md, crowds). The streams beyond the slots wait their turn
before their first step (authentication), and a slot is freed when a setup ends,
also when it fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from tamto_common.errors import Unauthenticated
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
