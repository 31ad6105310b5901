"""Service processes forked by the fork server (`tamto_local.forkserver`): its blocking
client, one per test process, and `ForkedProcess`, which a test controls as it controls a
`TestProcess` (start, kill -9, pause, stop, log, exit code).

`TestCluster` starts its services this way, and `tests/programs.run_to_end` a test's
`tamto` commands (`run_forked`), unless `TAMTO_TEST_FORK=0`; processes started inside
a network namespace, and every other program, still start with `subprocess`. The
launcher (`tamto up`, the benchmark, the campaigns) forks its services from a server of
its own (`tamto_local.forking`); the container tests start them as `python -m` does.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Self

from tamto_local.forking import SERVER_ENV, Child, ChildTable, ForkedChild, server_argv
from tamto_testing.processes import START_TIMEOUT_S, TestProcess

#: Set to 0 to start every test cluster's service with `subprocess` instead.
SWITCH = "TAMTO_TEST_FORK"


def forking() -> bool:
    """Whether test clusters fork their services from the fork server."""
    return os.environ.get(SWITCH, "1") != "0"


class ForkServer:
    """The fork server process of this test process, and what it reported: a pid per
    request (in order), and each child's exit code once it ended."""

    def __init__(self, extra_env: Mapping[str, str] | None = None) -> None:
        """`extra_env`: more environment for the server itself (say a PYTHONPATH)."""
        env = {**os.environ, **SERVER_ENV, **(extra_env or {})}
        self._proc = subprocess.Popen(
            server_argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self._lock = threading.Lock()
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._ended = threading.Condition()
        self._children = ChildTable()
        self._gone = False
        assert self._proc.stdout is not None
        self._reader = threading.Thread(
            target=self._read, args=(self._proc.stdout,), name="forkserver", daemon=True
        )
        self._reader.start()

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            fields = json.loads(line)
            with self._ended:
                if "exited" in fields:
                    self._children.ended(int(fields["exited"]), int(fields["code"]))
                    self._ended.notify_all()
                    continue
                if "pid" in fields:
                    fields["serial"] = self._children.forked(int(fields["pid"])).serial
            self._answers.put(fields)
        with self._ended:
            self._gone = True
            self._ended.notify_all()
        self._answers.put({"error": "the fork server ended"})

    def close(self) -> None:
        """End the server (its children go on) and wait for it."""
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(30)
        self._reader.join(30)
        assert self._proc.stdout is not None
        self._proc.stdout.close()

    def alive(self) -> bool:
        return not self._gone and self._proc.poll() is None

    def spawn(
        self,
        module: str,
        argv: list[str],
        env: Mapping[str, str],
        log: Path,
        **options: str,
    ) -> Child:
        """Fork `python -m <module>` (argv, env, output appended to `log`; `options`:
        `stderr`, `stdin` and `cwd`, as `tamto_local.forkserver.Request` takes them)."""
        request = {"module": module, "argv": argv, "env": dict(env), "log": str(log), **options}
        with self._lock:
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
            answer = self._answers.get(timeout=START_TIMEOUT_S)
        if "pid" not in answer:
            raise RuntimeError(f"the fork server could not start {module}: {answer['error']}")
        return Child(int(answer["serial"]), int(answer["pid"]))

    def returncode(self, child: Child) -> int | None:
        with self._ended:
            return self._children.code(child)

    def wait(self, child: Child, timeout_s: float | None = None) -> int | None:
        """`child`'s exit code once it ended; None after `timeout_s`, or when the server
        is gone and the end was never reported."""
        with self._ended:
            self._ended.wait_for(
                lambda: self._children.code(child) is not None or self._gone, timeout_s
            )
            return self._children.code(child)


_server: ForkServer | None = None
_server_lock = threading.Lock()


def fork_server() -> ForkServer:
    """This process's fork server, started on first use (again if it ended)."""
    global _server
    with _server_lock:
        if _server is None or not _server.alive():
            _server = ForkServer()
        return _server


class ForkedProcess(ForkedChild, TestProcess):
    """A service process forked by the fork server: `python -m <module>` with `env`, its
    output in `log_path`. Signals go to its pid; its exit code comes from the server."""

    def __init__(
        self,
        name: str,
        module: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        server: ForkServer | None = None,
    ) -> None:
        """`server`: the fork server to use (by default this process's, `fork_server`)."""
        super().__init__(name, [sys.executable, "-m", module], log_path, env)
        self.module = module
        self._server: ForkServer | None = server
        self._forked = None

    def start(self) -> Self:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._server = self._server or fork_server()
        # sys.argv as `python -m` makes it: argv[0] is the module's path (runpy sets it).
        self._forked = self._server.spawn(self.module, [self.module], self.env, self.log_path)
        return self

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Its exit code once it ended; None after `timeout_s`."""
        assert self._server is not None, "not started"
        assert self._forked is not None, "not started"
        return self._server.wait(self._forked, timeout_s)

    def kill9(self) -> None:
        if self.running():
            self.send(signal.SIGKILL)
            self.wait(None)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        if self._forked is None:
            return None
        if self.running():
            self.send(signal.SIGTERM)
            if self.wait(timeout_s) is None:
                self.send(signal.SIGKILL)
                self.wait(None)
        return self.returncode


def run_forked(
    module: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin: str | None,
    timeout: float,
    cwd: Path | None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, -m, module, *args], capture_output=True, text=True,
    check=False)` through the fork server: the same result, and the same
    `subprocess.TimeoutExpired` (the child killed first) after `timeout`."""
    server = fork_server()
    argv = [sys.executable, "-m", module, *args]
    with tempfile.TemporaryDirectory(prefix="forked-") as scratch:
        files = {name: Path(scratch) / name for name in ("stdin", "stdout", "stderr")}
        files["stdin"].write_text(stdin or "")
        child = server.spawn(
            module,
            [module, *args],
            env,
            files["stdout"],
            stderr=str(files["stderr"]),
            stdin=str(files["stdin"]),
            cwd=str(cwd or ""),
        )
        code = server.wait(child, timeout)
        if code is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            server.wait(child)
            raise subprocess.TimeoutExpired(argv, timeout)
        out, err = (files[n].read_text(errors="replace") for n in ("stdout", "stderr"))
        return subprocess.CompletedProcess(argv, code, out, err)
