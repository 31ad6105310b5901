"""A call in flight to a peer that stops answering fails soon, not at its deadline.

The peer here is a gRPC server process stopped with SIGSTOP: the kernel still holds
its TCP connection, as a peer behind a network cut seems to, but nothing answers the
channel's pings. Without keep-alive pings the call would wait for its 30 s deadline
(gRPC's default keep-alive is off; the previous setting noticed after 10-15 s).
"""

from __future__ import annotations

import os
import signal
import time

import grpc
from backlog_server_process import backlog_server

from tamto_common.channels import peer_channel

#: Ping interval plus ping timeout (2 s), with room for a loaded machine.
NOTICED_WITHIN_S = 6.0


async def test_a_call_to_a_stopped_peer_fails_unavailable_within_seconds() -> None:
    async with backlog_server() as server:
        await server.release()  # the server's loop runs
        channel = peer_channel(f"127.0.0.1:{server.port}")
        try:
            echo = channel.stream_stream("/t.T/Echo")
            answered = echo()
            await answered.write(b"x")
            assert await answered.read() == b"x"  # connected and served
            waiting = echo(timeout=30)  # open, its first message never sent: in flight
            os.kill(server.process.pid, signal.SIGSTOP)
            started = time.monotonic()
            try:
                await waiting.read()
                raise AssertionError("a stopped server answered")
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
            took = time.monotonic() - started
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
            await channel.close()
    assert code is grpc.StatusCode.UNAVAILABLE, code
    assert took < NOTICED_WITHIN_S, f"noticed after {took:.1f} s"
