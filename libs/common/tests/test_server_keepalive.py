"""A server notices a client that stopped answering within seconds, not a minute.

A router holds a consumer's session, and with it the messages the consumer has not
acked, until the consume stream ends; on an exclusive subscription the session also
keeps every other consumer out. When the client vanishes behind a network cut the
stream only ends when the server's keep-alive ping goes unanswered. gRPC core times
that ping by `grpc.http2.ping_timeout_ms` (default 60 s), not only by
`grpc.keepalive_timeout_ms`, so `SERVER_OPTIONS` sets both
(`tamto_protocol.keepalive` explains the same for channels).

The client here is a process stopped with SIGSTOP: its TCP connection stays up, as
a client's behind a cut seems to, but nothing answers the server's pings. The server
pings every second here (every 10 s in service) to keep the test short.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator

import grpc

from tamto_common.channels import SERVER_OPTIONS
from tamto_testing.grpc_servers import listen

#: The server's ping interval in this test.
PING_EVERY_MS = 1_000
#: The ping interval plus `grpc.keepalive_timeout_ms` (5 s), with room for a loaded machine.
NOTICED_WITHIN_S = 12.0

CLIENT = """
import asyncio, sys
import grpc

async def main() -> None:
    async with grpc.aio.insecure_channel(sys.argv[1]) as channel:
        call = channel.stream_stream("/t.T/Hold")()
        await call.write(b"x")
        await call.read()
        print("held", flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


def options() -> list[tuple[str, int]]:
    kept = [o for o in SERVER_OPTIONS if o[0] != "grpc.keepalive_time_ms"]
    return [*kept, ("grpc.keepalive_time_ms", PING_EVERY_MS)]


async def test_a_stream_from_a_stopped_client_ends_within_seconds() -> None:
    ended = asyncio.Event()

    async def hold(
        requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        try:
            async for request in requests:
                yield request
        finally:
            ended.set()

    server = grpc.aio.server(options=options())
    handler = grpc.stream_stream_rpc_method_handler(hold)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("t.T", {"Hold": handler})]
    )
    port = listen(server)
    await server.start()
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, f"127.0.0.1:{port}", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert client.stdout is not None
        line = await asyncio.wait_for(client.stdout.readline(), 30)
        assert line.strip() == b"held", line
        os.kill(client.pid, signal.SIGSTOP)
        started = time.monotonic()
        try:
            await asyncio.wait_for(ended.wait(), NOTICED_WITHIN_S)
        except TimeoutError:
            raise AssertionError(
                f"the server still held the stream {NOTICED_WITHIN_S} s after its client stopped"
            ) from None
        assert time.monotonic() - started >= 1.0, "ended before a ping could go unanswered"
    finally:
        client.kill()
        await client.wait()
        await server.stop(None)
