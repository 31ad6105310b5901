"""The fork server: one process that imports the services' libraries once and forks
each service process a local system starts. Its clients: `tamto_local.forking` for
the launcher (`tamto up`, the benchmark, the chaos campaigns) and
`tamto_testing.forked` for the tests' clusters.

Why it exists: a service's start is mostly its imports (pyarrow, gRPC, protobuf,
structlog, NATS, etcd, JWT: about a second of CPU each time), which a launcher pays
for every service it starts or restarts, and the suite's clusters start hundreds. A
child forked from this process has them already and starts at the service's own
`__main__`, run as `python -m tamto_<service>` runs it: the same argv, environment,
log file, session and exit status, its own pid, and the interpreter's normal shutdown
at its end. What a fork cannot give it afresh: every child shares the server's string
hash seed, and Python names it by the server's command line (`ps` shows
`python -m tamto_local.forkserver`).

Only libraries every service imports are preloaded, never a service's own modules:
those register metrics in the process's Prometheus registry, which a forked router
would otherwise export as well as its own. Nothing here may start a thread or an
event loop before a fork: the child has only the forking thread.

Protocol, one JSON object per line. Requests on stdin:
`{"module": "tamto_router", "argv": [...], "env": {...}, "log": "/path"}` (optionally
"stderr", "stdin" and "cwd": see `Request`); answers on
stdout, in order: `{"pid": N}` per request (`{"error": "..."}` when the fork failed),
and `{"exited": N, "code": C}` when child N ends (C as `subprocess.Popen.returncode`:
the negative signal number for a signalled child). EOF on stdin ends the server; its
children go on, as a `Popen` child outlives its parent.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import sys
from dataclasses import dataclass
from typing import Any

#: Libraries every service imports, heaviest first (none starts a thread at import but
#: numpy's BLAS, which the server's environment limits to the calling thread).
PRELOAD = (
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.ipc",
    "grpc",
    "grpc.aio",
    "grpc_health.v1.health",
    "google.protobuf.json_format",
    "structlog",
    "nats",
    "aetcd",
    "jwt",
    "cryptography.x509",
    "dns.asyncresolver",
    "psutil",
    "prometheus_client",
    "opentelemetry.trace",
    "tamto_protocol.v1.gateway_pb2_grpc",
    "tamto_protocol.v1.router_pb2_grpc",
    "tamto_protocol.v1.storage_pb2_grpc",
)


@dataclass(frozen=True)
class Request:
    """What one child runs: `python -m <module>` with `argv` (its `sys.argv`), `env`
    as its whole environment, in `cwd` (the server's when empty), its output appended
    to `log` (its stderr to `stderr` instead, when given), its input read from `stdin`."""

    module: str
    argv: list[str]
    env: dict[str, str]
    log: str
    stderr: str = ""
    stdin: str = os.devnull
    cwd: str = ""

    @classmethod
    def from_line(cls, line: bytes) -> Request:
        fields: dict[str, Any] = json.loads(line)
        return cls(
            module=str(fields["module"]),
            argv=[str(a) for a in fields["argv"]],
            env={str(k): str(v) for k, v in fields["env"].items()},
            log=str(fields["log"]),
            stderr=str(fields.get("stderr") or ""),
            stdin=str(fields.get("stdin") or os.devnull),
            cwd=str(fields.get("cwd") or ""),
        )


def _answer(fields: dict[str, Any]) -> None:
    os.write(sys.__stdout__.fileno() if sys.__stdout__ else 1, json.dumps(fields).encode() + b"\n")


def _reap() -> None:
    """Report every child that ended since the last call."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _answer({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _become_child(request: Request, wakeup: tuple[int, int]) -> None:
    """In the forked child: a session of its own, the request's stdin, stdout and
    stderr, nothing else of the server's open, the request's directory, environment
    and argv, default signal handling."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    append = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    log = os.open(request.log, append, 0o644)
    os.dup2(os.open(request.stdin, os.O_RDONLY), 0)
    os.dup2(log, 1)
    os.dup2(os.open(request.stderr, append, 0o644) if request.stderr else log, 2)
    os.closerange(3, 1 << 16)
    if request.cwd:
        os.chdir(request.cwd)
    del wakeup  # closed with the rest
    os.environ.clear()
    os.environ.update(request.env)
    sys.argv = list(request.argv)


def serve() -> Request | None:
    """Preload, then fork a child per request until stdin closes. Returns in a child
    only, with what it is to run; in the server, None at the end."""
    for name in PRELOAD:
        with contextlib.suppress(ModuleNotFoundError):  # the service's own error to report
            importlib.import_module(name)
    wakeup = os.pipe()
    os.set_blocking(wakeup[1], False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        ready, _, _ = select.select([0, wakeup[0]], [], [])
        if wakeup[0] in ready:
            os.read(wakeup[0], 4096)
            _reap()
        if 0 not in ready:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return None
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = Request.from_line(line)
            try:
                pid = os.fork()
            except OSError as exc:
                _answer({"error": f"fork failed: {exc}"})
                continue
            if pid == 0:
                _become_child(request, wakeup)
                return request
            _answer({"pid": pid})


def main() -> None:
    request = serve()
    if request is not None:
        runpy.run_module(request.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
