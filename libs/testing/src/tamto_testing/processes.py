"""Blocking process control for tests: start, wait for readiness, kill -9, stop.

Output goes to a log file (never an unread pipe, which would block a chatty
child), and the file's tail is included when a process fails to become ready.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tamto_common.polling import poll_blocking


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition` until true (an exception: not yet); AssertionError naming `what`
    after the deadline (`tamto_common.polling`)."""
    poll_blocking(condition, timeout_s, what, retry_errors=True)


def tcp_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


class TestProcess:
    """One child process with its output in `log_path`."""

    __test__ = False  # not a test class, despite the name

    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(os.environ if env is None else env)
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> TestProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float = 30.0) -> None:
        def check() -> bool:
            if not self.alive():
                raise AssertionError(f"{self.name} exited early:\n{self.log_tail()}")
            return ready()

        try:
            wait_for(check, timeout_s, f"{self.name} to be ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- {self.name} log ---\n{self.log_tail()}") from None

    def kill9(self) -> None:
        """Crash it: SIGKILL, as `kill -9` does."""
        if self.popen is not None and self.alive():
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()

    def pause(self) -> None:
        """Freeze it (SIGSTOP): alive but silent, so its etcd lease lapses after the TTL."""
        if self.popen is not None and self.alive():
            self.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused process go on (SIGCONT)."""
        if self.popen is not None and self.alive():
            self.popen.send_signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM and wait; SIGKILL after the timeout. Returns the exit code."""
        if self.popen is None:
            return None
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode
