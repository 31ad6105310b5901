"""A TCP proxy that delays every chunk by a set time: `Netns.delay()` where the kernel
has no tc netem (this machine's has not).

It runs inside a network namespace (`tamto_testing.netns`, `tamto_local.netlab`),
where iptables nat rules REDIRECT the namespace's TCP over its veth to it: connections the namespace
opens (OUTPUT) and connections arriving on the veth (PREROUTING). For each accepted
connection it reads the original destination (SO_ORIGINAL_DST), connects there with
`MARK` set (the nat rules skip marked packets, so its own connections are not
redirected again) and forwards each chunk, both ways, once `delay` has passed since
it arrived: a queue per direction keeps the order. So a request and its answer take
2 x delay more, as with netem on both ends of a link; unlike netem the delay is per
chunk, not per packet, and the TCP handshake is not delayed.

Protocol with its parent: the proxy prints its port on stdout's first line, then
reads lines of stdin, each a delay in milliseconds (applied to chunks arriving from
then on, also on open connections; 0 forwards at once), answering `delay <ms>` on
stdout once it applies; end of stdin stops it.

Run: `python -m tamto_local.delay_proxy` (inside the namespace; `tamto_testing.delay_proxy`
is the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys

#: Set on every socket of the proxy: the nat rules and `ss -K` filters skip it.
MARK = 0x7
#: getsockopt(SOL_IP, SO_ORIGINAL_DST): the destination before a REDIRECT (linux/netfilter_ipv4.h).
SO_ORIGINAL_DST = 80
#: Bytes read at once from a connection (one chunk).
CHUNK = 65536


class DelayProxy:
    """The listener and the current delay (seconds)."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self._connections: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
        listener.bind(("0.0.0.0", 0))
        listener.setblocking(False)
        server = await asyncio.start_server(self._accepted, sock=listener)
        print(listener.getsockname()[1], flush=True)
        try:
            await self._read_delays()
        finally:
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _read_delays(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            ms = int(line)
            self.delay_s = ms / 1000
            print(f"delay {ms}", flush=True)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            sock: socket.socket = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
            raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
            port, packed = struct.unpack_from("!2xH4s", raw)
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
            upstream.setblocking(False)
            try:
                await asyncio.get_running_loop().sock_connect(
                    upstream, (socket.inet_ntoa(packed), port)
                )
            except OSError:
                upstream.close()
                raise
            up_reader, up_writer = await asyncio.open_connection(sock=upstream)
            pipes = [
                asyncio.create_task(self._pipe(reader, up_writer)),
                asyncio.create_task(self._pipe(up_reader, writer)),
            ]
            try:
                await asyncio.gather(*pipes)
            except OSError:
                # A reset on one end is passed on as a reset of the other.
                up_writer.transport.abort()
                writer.transport.abort()
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
                up_writer.close()
        except OSError:
            writer.transport.abort()  # the destination refused or is unreachable: reset
        finally:
            writer.close()
            self._connections.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Forward `reader` to `writer`, each chunk `delay_s` after it arrived, in order;
        end of input is forwarded as a half close, at its own due time."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while True:
                data = await reader.read(CHUNK)
                queue.put_nowait((loop.time() + self.delay_s, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender


def main() -> None:
    asyncio.run(DelayProxy().serve())


if __name__ == "__main__":
    main()
