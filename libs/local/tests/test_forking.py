"""A service the launcher forks (`tamto_local.forking`) behaves as one it starts with
`python -m`: its output reaches the sink line by line and to its last line, SIGTERM
and SIGKILL end it with Popen's codes, and a fork server that dies takes none of its
children out of the launcher's sight."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tamto_local.forking import AsyncForkServer, ForkedManagedProcess, forkable
from tamto_testing.waiting import eventually

#: Prints on stdout and stderr, then ignores SIGTERM or ends as told.
PROBE = textwrap.dedent(
    """
    import os, signal, sys, time
    print("out", os.environ["PROBE"])
    print("err", "pyarrow" in sys.modules, file=sys.stderr, flush=True)
    if os.environ["PROBE"] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring TERM", flush=True)
    if os.environ["PROBE"] == "chatty":
        for i in range(2000):
            print("line", i)
        sys.exit(4)
    time.sleep(120)
    """
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[AsyncForkServer]:
    (tmp_path / "fork_probe.py").write_text(PROBE)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    server = await AsyncForkServer.start({"PYTHONPATH": path})
    yield server
    await server.close()


def probe(server: AsyncForkServer, kind: str, lines: list[tuple[str, str]]) -> ForkedManagedProcess:
    """The probe as `kind`, its lines into `lines` (the server's path finds its module)."""
    env = {**os.environ, "PROBE": kind}
    return ForkedManagedProcess(
        "probe", "fork_probe", server, env=env, sink=lambda *line: lines.append(line)
    )


def gone(pid: int) -> bool:
    """Whether `pid` no longer runs (ended, or a zombie nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def test_output_reaches_the_sink_and_sigterm_ends_the_child(
    server: AsyncForkServer,
) -> None:
    lines: list[tuple[str, str]] = []
    proc = probe(server, "polite", lines)
    await proc.start()
    await eventually(lambda: len(lines) == 2, 30, "both lines forwarded")
    assert sorted(lines) == [("probe", "err True"), ("probe", "out polite")], (
        "stderr goes with stdout, and the server's libraries are already imported"
    )
    assert proc.running()
    assert proc.pid is not None
    assert await proc.stop() == -signal.SIGTERM
    assert not proc.running()
    assert proc.returncode == -signal.SIGTERM


async def test_a_child_that_ignores_sigterm_is_killed(server: AsyncForkServer) -> None:
    lines: list[tuple[str, str]] = []
    proc = probe(server, "stubborn", lines)
    await proc.start()
    await eventually(lambda: "ignoring TERM" in proc.tail, 30, "the child ignoring SIGTERM")
    assert await proc.stop(timeout_s=0.5) == -signal.SIGKILL


async def test_every_line_is_pumped_before_wait_returns(server: AsyncForkServer) -> None:
    lines: list[tuple[str, str]] = []
    proc = probe(server, "chatty", lines)
    await proc.start()
    assert await asyncio.wait_for(proc.wait(), 30) == 4
    said = [text for _, text in lines if text.startswith("line ")]
    assert said == [f"line {i}" for i in range(2000)]


async def test_a_dead_servers_children_are_killed_and_reported(
    server: AsyncForkServer,
) -> None:
    lines: list[tuple[str, str]] = []
    proc = probe(server, "polite", lines)
    await proc.start()
    await eventually(lambda: len(lines) == 2, 30, "the child started")
    pid = proc.pid
    assert pid is not None
    os.kill(server.pid, signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL
    assert not server.alive()
    with pytest.raises(OSError, match="the fork server ended"):
        await server.spawn("fork_probe", ["fork_probe"], dict(os.environ), os.devnull)
    await eventually(lambda: gone(pid), 30, "the orphaned child killed")


def test_only_python_m_of_this_interpreter_forks() -> None:
    assert forkable([sys.executable, "-m", "tamto_router"]) == "tamto_router"
    assert forkable(["ip", "netns", "exec", "n1", sys.executable, "-m", "tamto_router"]) is None
    assert forkable([sys.executable, "-m", "tamto_router", "--flag"]) is None
    assert forkable(["/usr/bin/python3.9", "-m", "tamto_router"]) is None


#: A fork server that starts one child, answers its pid, and dies at once.
ANSWERS_THEN_DIES = (
    "import json, subprocess, sys; sys.stdin.readline(); "
    "child = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL, "
    "start_new_session=True); "
    "print(json.dumps({'pid': child.pid}), flush=True)"
)


async def test_a_child_answered_just_before_the_server_died_is_killed_and_reported() -> None:
    """The child is registered when its answer is read, so the server's end finds it
    whether or not `spawn` has returned by then. (Here `spawn` returns first, as it
    nearly always does: the other order could not be forced from outside.)"""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        ANSWERS_THEN_DIES,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    server = AsyncForkServer(proc)
    child = await server.spawn("fork_probe", ["fork_probe"], dict(os.environ), os.devnull)
    assert await asyncio.wait_for(server.wait(child), 30) == -signal.SIGKILL
    await eventually(lambda: gone(child.pid), 30, "the orphaned child killed")
    await server.close()
