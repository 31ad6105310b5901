"""Tamto's gRPC servers keep a burst of new calls waiting instead of resetting them.

The crowd: 10,000 consumers attaching at once had 0-7,259 streams reset
per run (CANCELLED "CANCELLED", INTERNAL "Internal error from Core") before the
gateway's handler ever saw them: gRPC's Python server takes accepted calls from
its event loop one at a time, and gRPC core refuses calls waiting beyond its
default backlog (some past 1,000, all past 3,000). `SERVER_OPTIONS` raises it.
Here the server's loop is held while 4,000 streams arrive: each must get its
answer once the loop runs again (with gRPC's defaults about 2,300 of 5,000 were
reset so, measured 2026-11-26).
"""

from __future__ import annotations

import asyncio

import grpc
from backlog_server_process import backlog_server

STREAMS = 4_000


async def answer(call: grpc.aio.StreamStreamCall) -> object:
    try:
        return await call.read()
    except grpc.aio.AioRpcError as exc:
        return exc.code()


async def test_streams_arriving_while_the_loop_is_held_wait_their_turn() -> None:
    async with backlog_server() as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            echo = channel.stream_stream("/t.T/Echo")
            calls = [echo() for _ in range(STREAMS)]
            written = await asyncio.gather(*(c.write(b"x") for c in calls), return_exceptions=True)
            await server.release()  # the server's loop runs again
            async with asyncio.timeout(120):
                answers = await asyncio.gather(*(answer(c) for c in calls))
    refused = [w for w in written if w is not None]
    assert refused == [], f"{len(refused)} of {STREAMS} writes failed: {refused[0]}"
    others = [a for a in answers if a != b"x"]
    assert others == [], f"{len(others)} of {STREAMS} streams not answered: {set(others)}"
