"""Service processes the launcher forks from a fork server (`tamto_local.forkserver`)
instead of starting `python -m tamto_<service>` anew: the asyncio client of the server,
and `ForkedManagedProcess`, which a `LocalCluster` starts, signals, watches and stops
as it does a `ManagedProcess`, its output pumped into the same sink.

A forked child's output reaches the launcher through a FIFO: the server opens it as the
child's stdout and stderr, and the launcher holds a write end of its own until the
server reports the child's end, so the pump reads to that end and no sooner (a FIFO
reads as ended while no writer has it open, as it has none before the child's open).

Should the server itself end, its children are no longer anyone's to watch: each
still running is killed and reported as killed, and the next start forks from a new
server (`LocalCluster` then restarts them as after a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tamto_local.process import ChildProcess, LineSink, ManagedProcess

#: The fork server's own environment beyond the launcher's: numpy's BLAS would start a
#: thread at import, which a fork does not copy.
SERVER_ENV = {"OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def server_argv() -> list[str]:
    return [sys.executable, "-m", "tamto_local.forkserver"]


def forkable(argv: Sequence[str]) -> str | None:
    """The module `argv` runs if it is `python -m <module>` with this interpreter and
    nothing after the module (what a fork server can run), else None."""
    if len(argv) == 3 and argv[0] == sys.executable and argv[1] == "-m":
        return argv[2]
    return None


@dataclass(frozen=True)
class Child:
    """One forked child: its pid, and the serial number of its fork. Exit codes are kept
    by serial, not pid: the kernel gives a pid again once its process is gone (a pid
    range of 32,768 here), and a new child must not look like an old one that ended."""

    serial: int
    pid: int


class ChildTable:
    """The children a fork server reported, and the exit code of each that ended (by
    serial number: see `Child`)."""

    def __init__(self) -> None:
        self._codes: dict[int, int] = {}  # by serial
        self._live: dict[int, int] = {}  # serial by pid, until the child ends
        self._forks = 0

    def forked(self, pid: int) -> Child:
        """A child forked as `pid` (reported before its end, which names it by pid)."""
        self._forks += 1
        self._live[pid] = self._forks
        return Child(self._forks, pid)

    def ended(self, pid: int, code: int) -> Child | None:
        """Child `pid` ended with `code`: which child that was (None: not one of ours)."""
        serial = self._live.pop(pid, None)
        if serial is None:
            return None
        self._codes[serial] = code
        return Child(serial, pid)

    def code(self, child: Child) -> int | None:
        return self._codes.get(child.serial)

    def live(self) -> list[Child]:
        return [Child(serial, pid) for pid, serial in self._live.items()]


class ExitCodes(Protocol):
    """What a fork server's client knows of its children's ends."""

    def returncode(self, child: Child) -> int | None: ...


class ForkedChild(ChildProcess):
    """What every forked child's control shares, beside how it waits (blocking or
    asyncio): it is signalled by pid, and its exit code comes from its server."""

    _server: ExitCodes | None
    _forked: Child | None

    @property
    def pid(self) -> int | None:
        return self._forked.pid if self._forked else None

    @property
    def returncode(self) -> int | None:
        if self._server is None or self._forked is None:
            return None
        return self._server.returncode(self._forked)

    def running(self) -> bool:
        return self._forked is not None and self.returncode is None

    def send(self, sig: signal.Signals) -> None:
        if self._forked is not None and self.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._forked.pid, sig)


class AsyncForkServer:
    """A fork server process and what it reported, for asyncio code. Start it with
    `AsyncForkServer.start()`; `close()` ends it (its children go on)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._children = ChildTable()
        self._pids: asyncio.Queue[Child | str] = asyncio.Queue()  # a child, or an error
        self._ends: dict[int, asyncio.Future[int]] = {}  # by serial
        self._lock = asyncio.Lock()
        self._reader = asyncio.create_task(self._read(), name="forkserver-answers")

    @classmethod
    async def start(cls, env: Mapping[str, str] | None = None) -> AsyncForkServer:
        """Start a fork server with the launcher's environment (and `env` over it)."""
        proc = await asyncio.create_subprocess_exec(
            *server_argv(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **SERVER_ENV, **(env or {})},
            start_new_session=True,  # Ctrl-C in a terminal reaches the launcher only
        )
        return cls(proc)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return not self._reader.done()

    async def _read(self) -> None:
        assert self._proc.stdout is not None
        while line := await self._proc.stdout.readline():
            fields = json.loads(line)
            if "exited" in fields:
                child = self._children.ended(int(fields["exited"]), int(fields["code"]))
                if child is not None:
                    self._end(child, int(fields["code"]))
            elif "pid" in fields:  # registered here, so the server's end below covers it
                child = self._children.forked(int(fields["pid"]))
                self._ends[child.serial] = asyncio.get_running_loop().create_future()
                self._pids.put_nowait(child)
            else:
                self._pids.put_nowait(str(fields.get("error")))
        self._pids.put_nowait("the fork server ended")
        for child in self._children.live():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)  # nobody's to watch: see the docstring
            self._children.ended(child.pid, -signal.SIGKILL)
            self._end(child, -signal.SIGKILL)

    def _end(self, child: Child, code: int) -> None:
        future = self._ends.get(child.serial)
        if future is not None and not future.done():
            future.set_result(code)

    async def spawn(self, module: str, argv: list[str], env: Mapping[str, str], log: str) -> Child:
        """Fork `python -m <module>` with `argv` as its sys.argv, `env` as its whole
        environment, its stdout and stderr appended to `log`. OSError if it could not."""
        request = {"module": module, "argv": argv, "env": dict(env), "log": log}
        async with self._lock:
            if not self.alive():
                raise OSError("the fork server ended")
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            await self._proc.stdin.drain()
            answer = await self._pids.get()
        if isinstance(answer, str):
            raise OSError(f"the fork server could not start {module}: {answer}")
        return answer

    def returncode(self, child: Child) -> int | None:
        return self._children.code(child)

    async def wait(self, child: Child) -> int:
        """`child`'s exit code once it ended."""
        return await asyncio.shield(self._ends[child.serial])

    async def close(self) -> None:
        """End the server (its children go on) and wait for it."""
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        await self._proc.wait()
        await self._reader


class ForkedManagedProcess(ForkedChild, ManagedProcess):
    """A `ManagedProcess` of `python -m <module>` forked by `server`."""

    def __init__(
        self,
        name: str,
        module: str,
        server: AsyncForkServer,
        *,
        env: Mapping[str, str] | None = None,
        sink: LineSink | None = None,
    ) -> None:
        super().__init__(name, [sys.executable, "-m", module], env=env, sink=sink)
        self.module = module
        self._server: AsyncForkServer = server
        self._forked = None

    async def start(self) -> None:
        self.tail = []
        scratch = Path(tempfile.mkdtemp(prefix=f"tamto-{self.name}-"))
        fifo = scratch / "output"
        os.mkfifo(fifo, 0o600)
        read_end = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        held = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # until the child's end
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_end, "rb", 0)
        )

        def release() -> None:
            os.close(held)
            with contextlib.suppress(OSError):
                fifo.unlink()
                scratch.rmdir()

        try:
            argv = [self.module]  # sys.argv as `python -m` makes it (runpy sets argv[0])
            self._forked = await self._server.spawn(self.module, argv, self.env, str(fifo))
        except BaseException:
            release()
            raise
        ended = asyncio.ensure_future(self._server.wait(self._forked))
        ended.add_done_callback(lambda _: release())
        self._pump = asyncio.create_task(self._forward(reader), name=f"pump-{self.name}")

    async def wait(self) -> int:
        assert self._forked is not None, "not started"
        code = await self._server.wait(self._forked)
        if self._pump is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        return code
