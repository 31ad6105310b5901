"""Child processes: the one place that says how Tamto starts, signals and stops them.

Every child is started alike (no stdin, stderr merged into stdout, its own session so
a Ctrl-C in a terminal reaches only the parent) and stopped alike (SIGTERM, then
SIGKILL once a grace period passed). Two ways to run one share that:
`ManagedProcess` for asyncio code (the launcher, the benchmark), its output pumped
line by line into a sink, and `LoggedProcess` for blocking code (the tests' clusters),
its output written to a log file (never an unread pipe, which would block a chatty
child).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

LineSink = Callable[[str, str], None]
"""Receives (process name, output line) for every line a child prints."""

#: How every child is spawned (`subprocess` and `asyncio.subprocess` share the values).
SPAWN_OPTIONS: Mapping[str, Any] = {
    "stdin": subprocess.DEVNULL,
    "stderr": subprocess.STDOUT,
    "start_new_session": True,  # Ctrl-C in a terminal reaches the parent only
}


class ChildProcess:
    """What a child is (name, command line, environment) and how it is signalled."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(os.environ if env is None else env)
        self._child: asyncio.subprocess.Process | subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    def running(self) -> bool:
        raise NotImplementedError

    def send(self, sig: signal.Signals) -> None:
        """Send `sig` if the child is still running (a child that just exited is fine)."""
        if self._child is not None and self.running():
            with contextlib.suppress(ProcessLookupError):
                self._child.send_signal(sig)


class ManagedProcess(ChildProcess):
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
        super().__init__(name, argv, env)
        self.cwd = cwd
        self._sink = sink
        self._proc: asyncio.subprocess.Process | None = None
        self._pump: asyncio.Task[None] | None = None
        self.tail: list[str] = []

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
            stdout=asyncio.subprocess.PIPE,
            **SPAWN_OPTIONS,
        )
        self._child = self._proc
        assert self._proc.stdout is not None
        self._pump = asyncio.create_task(self._forward(self._proc.stdout), name=f"pump-{self.name}")

    async def _forward(self, output: asyncio.StreamReader) -> None:
        """Pump `output` (the child's stdout and stderr) line by line until it ends."""
        while line := await output.readline():
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

    async def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout_s`."""
        if self.pid is None:
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


class LoggedProcess(ChildProcess):
    """One child process with its output in `log_path`, controlled by blocking calls."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(name, argv, env)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(self.argv, stdout=log, env=self.env, **SPAWN_OPTIONS)
        self._child = self.popen
        return self

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def alive(self) -> bool:
        return self.running()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def kill9(self) -> None:
        """Crash it: SIGKILL, as `kill -9` does."""
        if self.popen is not None and self.running():
            self.send(signal.SIGKILL)
            self.popen.wait()

    def pause(self) -> None:
        """Freeze it (SIGSTOP): alive but silent, so its etcd lease lapses after the TTL."""
        self.send(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused process go on (SIGCONT)."""
        self.send(signal.SIGCONT)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM and wait; SIGKILL after the timeout. Returns the exit code."""
        if self.popen is None:
            return None
        if self.running():
            self.send(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.send(signal.SIGKILL)
                self.popen.wait()
        return self.popen.returncode
