"""A child process whose output is forwarded line by line, with a name prefix."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

LineSink = Callable[[str, str], None]
"""Receives (process name, output line) for every line a child prints."""


class ManagedProcess:
    """Starts one command, pumps its stdout/stderr into a sink, stops it politely.

    The pump task is owned here and ends with the process.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        sink: LineSink | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self._sink = sink
        self._proc: asyncio.subprocess.Process | None = None
        self._pump: asyncio.Task[None] | None = None
        self.tail: list[str] = []

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> None:
        self.tail = []
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv,
            env=self.env,
            cwd=self.cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in a terminal reaches the launcher only
        )
        self._pump = asyncio.create_task(self._forward(), name=f"pump-{self.name}")

    async def _forward(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        while line := await self._proc.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            self.tail = [*self.tail[-49:], text]
            if self._sink is not None:
                self._sink(self.name, text)

    async def wait(self) -> int:
        assert self._proc is not None
        code = await self._proc.wait()
        if self._pump is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        return code

    def send(self, sig: signal.Signals) -> None:
        if self.running():
            assert self._proc is not None
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    async def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout_s`."""
        if self._proc is None:
            return None
        self.send(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.wait(), timeout_s)
        except TimeoutError:
            self.send(signal.SIGKILL)
            return await self.wait()

    async def kill(self) -> int:
        """SIGKILL now (a crash, as `kill -9` does it)."""
        self.send(signal.SIGKILL)
        return await self.wait()
