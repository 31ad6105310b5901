"""Blocking process control for tests: `tamto_local.process.LoggedProcess` (start,
kill -9, pause, stop, output in a log file) and a wait for readiness, whose failure
includes the log's tail."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable

from tamto_common.polling import poll_blocking
from tamto_local.process import LoggedProcess

#: How long a test waits for a process it starts to become ready. Generous because a
#: process that exits ends the wait at once (`TestProcess.wait_ready`), so only a hang
#: waits it out, while a healthy start can take tens of seconds on a loaded 2-core CI
#: machine (a router's imports alone passed 30 s at load 27).
START_TIMEOUT_S = 120.0


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition` until true (an exception: not yet); AssertionError naming `what`
    after the deadline (`tamto_common.polling`)."""
    poll_blocking(condition, timeout_s, what, retry_errors=True)


def tcp_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


class TestProcess(LoggedProcess):
    """One child process with its output in `log_path` (`tamto_local.process`), and a
    wait for it to become ready."""

    __test__ = False  # not a test class, despite the name

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until `ready()` (an exception: not yet); AssertionError with the log's
        tail at once when the process exits first, or after `timeout_s`.

        An exit ends the wait instead of raising inside it: `wait_for` retries errors
        (a port not open yet), so a raise there waited out the whole timeout.
        """
        try:
            wait_for(lambda: not self.alive() or ready(), timeout_s, f"{self.name} to be ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- {self.name} log ---\n{self.log_tail()}") from None
        if not self.alive():
            raise AssertionError(f"{self.name} exited early:\n{self.log_tail()}")
