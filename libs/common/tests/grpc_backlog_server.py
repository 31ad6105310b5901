"""A gRPC server with Tamto's `SERVER_OPTIONS` whose event loop is held until a
line arrives on stdin (run by test_server_backlog.py): the calls arriving
meanwhile wait in gRPC core's backlog, as a crowd's streams do behind a busy loop.

Its one method, `/t.T/Echo`, answers a stream's first message with itself.
Prints the port it listens on.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import grpc

from tamto_common.channels import SERVER_OPTIONS
from tamto_testing.grpc_servers import listen


async def echo_first(
    requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request
        return


async def main() -> None:
    server = grpc.aio.server(options=SERVER_OPTIONS)
    handler = grpc.stream_stream_rpc_method_handler(echo_first)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("t.T", {"Echo": handler})]
    )
    port = listen(server)
    await server.start()
    print(port, flush=True)
    sys.stdin.readline()  # holds the loop, so gRPC core queues what arrives
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())
