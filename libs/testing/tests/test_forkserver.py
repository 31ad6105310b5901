"""A service process forked by the fork server behaves as one started with
`python -m`: its argv, environment, log, session and exit status are the same, it runs
with one thread, and the libraries the server preloaded are already imported."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tamto_local.forking import ChildTable
from tamto_testing.forked import ForkedProcess, ForkServer, run_forked
from tamto_testing.processes import wait_for

PROBE = textwrap.dedent(
    """
    import os, signal, sys
    print("argv0", os.path.basename(sys.argv[0]), "name", __name__)
    print("env", os.environ.get("PROBE"), os.environ.get("SERVER_ONLY"))
    print("threads", len(os.listdir("/proc/self/task")), file=sys.stderr)
    print("own session", os.getsid(0) == os.getpid(), "stdin", os.read(0, 1) == b"")
    print("preloaded", "pyarrow" in sys.modules and "grpc" in sys.modules)
    if os.environ.get("PROBE") == "wait":
        signal.pause()
    if os.environ.get("PROBE") == "raise":
        raise RuntimeError("the probe failed")
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
    """
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    path = tmp_path_factory.mktemp("probe")
    (path / "fork_probe.py").write_text(PROBE)
    server = ForkServer({"PYTHONPATH": str(path), "SERVER_ONLY": "yes"})
    yield server
    server.close()


def probe(server: ForkServer, log: Path, **env: str) -> ForkedProcess:
    return ForkedProcess("probe", "fork_probe", log, env, server=server).start()


def test_a_child_runs_its_module_as_python_m_does(server: ForkServer, tmp_path: Path) -> None:
    log = tmp_path / "probe.log"
    child = probe(server, log, PROBE="one", PROBE_EXIT="3")
    assert child.wait(30) == 3
    text = log.read_text()
    assert "argv0 fork_probe.py name __main__" in text
    # the request's environment whole, nothing of the server's own
    assert "env one None" in text
    # stderr into the log too; a fork copies only the forking thread
    assert "threads 1" in text
    assert "own session True stdin True" in text
    assert "preloaded True" in text


def test_signals_and_failures_give_popen_exit_codes(server: ForkServer, tmp_path: Path) -> None:
    waiting = probe(server, tmp_path / "wait.log", PROBE="wait")
    wait_for(lambda: "preloaded" in (tmp_path / "wait.log").read_text(), 30, "the probe")
    assert waiting.running()
    assert waiting.pid is not None
    waiting.kill9()
    assert not waiting.running()
    assert waiting.returncode == -signal.SIGKILL
    stopped = probe(server, tmp_path / "stop.log", PROBE="wait")
    wait_for(lambda: "preloaded" in (tmp_path / "stop.log").read_text(), 30, "the probe")
    assert stopped.stop(30) == -signal.SIGTERM
    failing = probe(server, tmp_path / "raise.log", PROBE="raise")
    assert failing.wait(30) == 1
    assert "RuntimeError: the probe failed" in (tmp_path / "raise.log").read_text()


def test_a_new_child_with_an_ended_childs_pid_is_running() -> None:
    """The kernel hands a pid out again once its process is gone: the new child must
    not inherit the old one's exit code (a storage node looked as if it "exited early"
    right after it started, and kept running unseen)."""
    table = ChildTable()
    old = table.forked(4242)
    table.ended(4242, -9)
    new = table.forked(4242)
    assert table.code(old) == -9
    assert table.code(new) is None
    table.ended(4242, 0)
    assert (table.code(old), table.code(new)) == (-9, 0)


def test_run_forked_answers_as_subprocess_run_does(tmp_path: Path) -> None:
    (tmp_path / "in.json").write_text('{"b": [1]}')

    def json_tool(args: list[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        return run_forked(
            "json.tool", args, env=dict(os.environ), stdin=stdin, timeout=60, cwd=tmp_path
        )

    # stdin in, stdout out
    done = json_tool(["--compact"], '{"a": 1}')
    assert (done.returncode, done.stdout, done.stderr) == (0, '{"a":1}\n', "")
    # a relative path is read from `cwd`
    done = json_tool(["--compact", "in.json"], None)
    assert done.stdout == '{"b":[1]}\n'
    # a failure's code and stderr, apart from stdout
    done = json_tool([], "{")
    assert done.returncode == 1
    assert "Expecting property name" in done.stderr
    assert done.stdout == ""
    assert done.args[:3] == [sys.executable, "-m", "json.tool"]


def test_run_forked_kills_a_child_that_outlives_its_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_forked(
            "timeit",
            ["-n", "1", "-r", "1", "import time; time.sleep(60)"],
            env=dict(os.environ),
            stdin=None,
            timeout=1.0,
            cwd=None,
        )
    assert time.monotonic() - started < 30
