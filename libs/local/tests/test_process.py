"""The two ways to run a child (`tamto_local.process`) start and stop it the same way:
SIGTERM first, SIGKILL once the grace period passed; output reaches the sink or the log."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from tamto_local.process import LoggedProcess, ManagedProcess
from tamto_testing.processes import wait_for
from tamto_testing.waiting import eventually

#: A child that ignores SIGTERM once it said so, then waits to be killed.
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ignoring TERM', flush=True); time.sleep(120)"
)
POLITE = (
    "import sys, time; print('one'); print('two', file=sys.stderr, flush=True); time.sleep(120)"
)


async def test_managed_process_pumps_output_lines_and_stops_on_sigterm() -> None:
    lines: list[tuple[str, str]] = []
    proc = ManagedProcess(
        "polite", [sys.executable, "-c", POLITE], sink=lambda *line: lines.append(line)
    )
    await proc.start()
    await eventually(lambda: len(lines) == 2, 30, "both lines forwarded")
    assert sorted(lines) == [("polite", "one"), ("polite", "two")], "stderr goes with stdout"
    assert await proc.stop() == -signal.SIGTERM
    assert not proc.running()


async def test_managed_process_kills_a_child_that_ignores_sigterm() -> None:
    proc = ManagedProcess("stubborn", [sys.executable, "-c", STUBBORN])
    await proc.start()
    await eventually(lambda: proc.tail == ["ignoring TERM"], 30, "the child ignoring SIGTERM")
    assert await proc.stop(timeout_s=0.5) == -signal.SIGKILL


def test_logged_process_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    proc = LoggedProcess("stubborn", [sys.executable, "-c", STUBBORN], tmp_path / "s.log").start()
    wait_for(lambda: "ignoring TERM" in proc.log_tail(), 30, "the child ignoring SIGTERM")
    assert proc.stop(timeout_s=0.5) == -signal.SIGKILL
    assert not proc.alive()
