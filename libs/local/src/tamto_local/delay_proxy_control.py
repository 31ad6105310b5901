"""The parent's side of the delay proxy's protocol (`tamto_local.delay_proxy`): start it
in a namespace, read its port, set a delay and wait until it applies, stop it.

Both the network tests (`tamto_testing.netns`) and the chaos campaign's network lab
(`tamto_local.netlab`) drive a proxy; this is the one place that speaks to it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

#: Longest the proxy may take to start or to answer a delay.
PROXY_TIMEOUT_S = 60.0


class DelayProxyError(RuntimeError):
    """The delay proxy did not start, did not answer, or exited."""


class ProxyControl:
    """A running delay proxy. Create with `ProxyControl.start`."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self._proc = proc
        #: The port the proxy listens on (inside its namespace).
        self.port = port

    @classmethod
    async def start(cls, argv_prefix: Sequence[str]) -> ProxyControl:
        """Start the proxy with `argv_prefix` before it (`ip netns exec <name>`)."""
        proc = await asyncio.create_subprocess_exec(
            *argv_prefix, sys.executable, "-m", "tamto_local.delay_proxy",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(proc, int(await _line(proc)))

    @property
    def pid(self) -> int:
        return self._proc.pid

    async def set_delay(self, ms: int) -> None:
        """Tell the proxy the new delay and wait until it applies it."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"{ms}\n".encode())
        await self._proc.stdin.drain()
        if await _line(self._proc) != f"delay {ms}":
            raise DelayProxyError(f"the delay proxy did not take {ms} ms")

    async def stop(self) -> None:
        """End its stdin (the proxy stops); kill it if it has not within the timeout."""
        proc = self._proc
        if proc.returncode is not None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), PROXY_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), PROXY_TIMEOUT_S)
    except TimeoutError:
        raise DelayProxyError(f"the delay proxy did not answer in {PROXY_TIMEOUT_S:.0f}s") from None
    if not line:
        raise DelayProxyError(f"the delay proxy exited ({await proc.wait()})")
    return line.decode().strip()
