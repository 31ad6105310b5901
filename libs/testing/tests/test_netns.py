"""`tamto_testing.netns`: a process in the namespace reaches the root end of its veth
until the link is cut, again once healed; a delayed link slows round trips until
healed; and nothing of the namespace outlives the block, also when the block fails."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from tamto_testing.needs import needs
from tamto_testing.netns import Netns, unavailable

pytestmark = needs(unavailable())

#: Connects from inside the namespace to argv[1]:argv[2]; exit 0 when it could.
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0).close()
except OSError:
    sys.exit(1)
"""


async def reaches(ns: Netns, host: str, port: int) -> bool:
    proc = await asyncio.create_subprocess_exec(
        *ns.argv_prefix, sys.executable, "-c", CONNECT, host, str(port)
    )
    return await proc.wait() == 0


def exists(name: str) -> bool:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return name in listing.stdout.split()


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


async def test_cut_and_heal_a_link_and_leave_nothing_behind() -> None:
    async with Netns() as ns:
        server = await asyncio.start_server(lambda r, w: w.close(), ns.root_address, 0)
        port = server.sockets[0].getsockname()[1]
        try:
            assert exists(ns.name)
            assert await reaches(ns, ns.root_address, port)
            await ns.cut([port])
            assert not await reaches(ns, ns.root_address, port)
            await ns.heal()
            assert await reaches(ns, ns.root_address, port)
            await ns.cut()
            assert not await reaches(ns, ns.root_address, port)
        finally:
            server.close()
            await server.wait_closed()
    assert not exists(ns.name)
    assert not link_exists(ns.root_veth)


async def test_a_failing_block_still_deletes_the_namespace() -> None:
    names: list[tuple[str, str]] = []

    async def failing() -> None:
        async with Netns() as ns:
            names.append((ns.name, ns.root_veth))
            raise RuntimeError("the test failed")

    with pytest.raises(RuntimeError, match="the test failed"):
        await failing()
    ((name, veth),) = names
    assert not exists(name)
    assert not link_exists(veth)


#: Inside the namespace: connects to argv[1]:argv[2], then prints the shortest of 5
#: one-byte round trips, in seconds.
ROUND_TRIP = """
import socket, sys, time
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60) as s:
    best = float("inf")
    for _ in range(5):
        started = time.monotonic()
        s.sendall(b"x")
        assert s.recv(1) == b"x"
        best = min(best, time.monotonic() - started)
print(best)
"""

#: Inside the namespace: an echo server on argv[1]; prints its port, serves until killed.
ECHO_SERVER = """
import socketserver, sys

class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)

with socketserver.ThreadingTCPServer((sys.argv[1], 0), Echo) as server:
    print(server.server_address[1], flush=True)
    server.serve_forever()
"""

#: The delay under test (each way); a round trip takes twice that more.
DELAY_MS = 400


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def round_trip_from(ns: Netns, host: str, port: int) -> float:
    """The shortest round trip of a connection the namespace opens to host:port."""
    proc = await asyncio.create_subprocess_exec(
        *ns.argv_prefix, sys.executable, "-c", ROUND_TRIP, host, str(port),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    return float(out)


async def round_trip_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
    """The shortest of 5 one-byte round trips on an open connection (EOF: an error)."""
    best = float("inf")
    for _ in range(5):
        started = time.monotonic()
        writer.write(b"x")
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(1), 60.0) == b"x"
        best = min(best, time.monotonic() - started)
    return best


async def test_a_delay_through_the_proxy_slows_both_directions_until_healed() -> None:
    """The proxy (this machine has no netem; elsewhere forced with proxy=True): round
    trips over the veth take 2 x the delay more, both on connections the namespace
    opens and on those it accepts; a connection open before the delay is reset (it
    would bypass the proxy); after `heal()` round trips are fast again, also on a
    connection opened through the proxy, and a delay set again applies to it; nothing
    is left behind."""
    delay_s = DELAY_MS / 1000
    async with Netns() as ns:
        server = await asyncio.start_server(echo, ns.root_address, 0)
        root_port = server.sockets[0].getsockname()[1]
        inner = await asyncio.create_subprocess_exec(
            *ns.argv_prefix, sys.executable, "-c", ECHO_SERVER, ns.address,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert inner.stdout is not None
            inner_port = int(await asyncio.wait_for(inner.stdout.readline(), 60.0))
            before = await asyncio.open_connection(ns.address, inner_port)
            assert await round_trip_on(*before) < delay_s
            assert await round_trip_from(ns, ns.root_address, root_port) < delay_s

            await ns.delay(DELAY_MS, proxy=True)
            proxy_pid = ns.proxy_pid
            assert proxy_pid is not None
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                await round_trip_on(*before)  # reset by delay(): it bypassed the proxy
            before[1].close()
            assert await round_trip_from(ns, ns.root_address, root_port) >= 2 * delay_s
            during = await asyncio.open_connection(ns.address, inner_port)
            assert await round_trip_on(*during) >= 2 * delay_s

            await ns.heal()
            assert await round_trip_on(*during) < delay_s  # still open, on the proxy
            assert await round_trip_from(ns, ns.root_address, root_port) < delay_s
            await ns.delay(DELAY_MS, proxy=True)
            assert await round_trip_on(*during) >= 2 * delay_s
            during[1].close()
        finally:
            inner.kill()
            await inner.wait()
            server.close()
            await server.wait_closed()
    assert not exists(ns.name)
    assert ns.proxy_pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(proxy_pid, 0)
