"""`tamto_local.netlab`: nodes reach each other and the root over the lab's bridge; an
isolated node reaches nobody, a one-way drop stops one direction only, a delay slows
a node's round trips, a heal undoes each; and nothing of the lab outlives its block."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from tamto_local.netlab import NetworkLab, unavailable
from tamto_testing.needs import needs

pytestmark = needs(unavailable())

#: Inside a namespace: connect to argv[1]:argv[2], send a line, wait for its echo;
#: print the round trip's seconds, exit 1 when it could not.
ECHO = """
import socket, sys, time
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0) as s:
        started = time.monotonic()
        s.sendall(b"x\\n")
        assert s.recv(10) == b"x\\n"
        print(time.monotonic() - started)
except OSError:
    sys.exit(1)
"""
#: Inside a namespace: an echo server on argv[1], printing its port.
SERVE = """
import socket, sys
srv = socket.create_server((sys.argv[1], 0))
print(srv.getsockname()[1], flush=True)
while True:
    conn, _ = srv.accept()
    with conn:
        conn.sendall(conn.recv(10))
"""


async def round_trip(prefix: tuple[str, ...], host: str, port: int) -> float | None:
    """The echo's round trip from a namespace (`prefix`) or the root (()), None: no answer."""
    proc = await asyncio.create_subprocess_exec(
        *prefix, sys.executable, "-c", ECHO, host, str(port), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return float(out) if proc.returncode == 0 else None


def leftovers(lab: NetworkLab) -> list[str]:
    """What of `lab` still exists: namespaces, links, its FORWARD rule."""
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    rules = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
    found = [n for n in lab.namespaces if n in spaces]
    found += [line for line in links.splitlines() if lab.token in line]
    return found + [line for line in rules.splitlines() if lab.token in line]


async def serve(lab: NetworkLab, node: int) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        *lab.argv_prefix(node), sys.executable, "-c", SERVE, lab.address(node),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    return proc, int(line)


@pytest.mark.timeout(300)
async def test_cuts_delays_and_heals_between_nodes_and_nothing_is_left() -> None:
    lab = NetworkLab(3)
    async with lab:
        server, port = await serve(lab, 1)
        one = lab.address(1)
        try:
            assert await round_trip(lab.argv_prefix(2), one, port) is not None
            assert await round_trip((), one, port) is not None  # the root, over the bridge
            await lab.isolate(1)
            assert await round_trip(lab.argv_prefix(2), one, port) is None
            assert await round_trip((), one, port) is None
            await lab.heal(1)
            assert await round_trip(lab.argv_prefix(2), one, port) is not None
            # Node 2 cannot send to node 1; node 3 still reaches node 1.
            await lab.drop(2, one, inbound=False)
            assert await round_trip(lab.argv_prefix(2), one, port) is None
            assert await round_trip(lab.argv_prefix(3), one, port) is not None
            await lab.heal(2)
            await lab.delay(1, 200)
            delayed = await round_trip(lab.argv_prefix(2), one, port)
            assert delayed is not None
            assert delayed >= 0.35, delayed  # 2 x 200 ms
            await lab.heal(1)
            started = time.monotonic()
            healed = await round_trip(lab.argv_prefix(2), one, port)
            assert healed is not None
            assert healed < 0.3, (healed, time.monotonic() - started)
        finally:
            server.kill()
            await server.wait()
        assert len(leftovers(lab)) >= 4  # three namespaces and the bridge, while open
    assert leftovers(lab) == []


async def test_nothing_is_left_when_the_block_fails() -> None:
    lab = NetworkLab(2)

    async def fails() -> None:
        async with lab:
            await lab.isolate(2)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await fails()
    assert leftovers(lab) == []
