"""`tamto_testing.netns`: a process in the namespace reaches the root end of its veth
until the link is cut, again once healed, and nothing of the namespace outlives the
block, also when the block fails."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from tamto_testing.netns import Netns, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")

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
