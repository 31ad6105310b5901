"""Worker processes, one event loop each, that run benchmark jobs on command.

A single Python event loop saturates long before a broker does, so producers and
consumers run in separate processes. The workers are started once (``spawn``,
so no gRPC state is inherited through ``fork``) and reused by every phase, which
keeps the import cost out of the measurements.

A job runs in two steps: it sets up (connects, subscribes) and reports ready;
when every job of the phase is ready the parent sends one common start time, so
all workers measure the same window.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
import traceback
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from tamto_bench.gate import Gate
from tamto_bench.spec import JobResult, JobSpec

#: How long after "go" the common window opens (lets every worker see the message).
_START_MARGIN_S = 0.05
#: How long a worker may take to start (imports) or to set a job up (connect, subscribe):
#: generous, since on a loaded 2-core machine a cluster's startup starves the workers.
_READY_TIMEOUT_S = 180.0


class BenchError(Exception):
    """A benchmark phase failed; the message says which and why."""


Job = Callable[[JobSpec, Gate], Coroutine[Any, Any, JobResult]]


def _job(spec: JobSpec) -> Job:
    # Imported here, in the worker: the parent never loads the clients it does not use.
    if spec.system == "tamto":
        from tamto_bench import tamto_jobs

        return tamto_jobs.JOBS[spec.role]
    if spec.system == "ephemeral" or spec.role in ("fan", "req", "rep", "ping"):
        from tamto_bench import ephemeral_jobs

        return ephemeral_jobs.JOBS[(spec.system, spec.role)]
    if spec.system in ("jetstream", "core"):
        from tamto_bench import nats_jobs

        return nats_jobs.JOBS[(spec.system, spec.role)]
    if spec.system == "ceiling":
        from tamto_bench import ceiling

        return ceiling.JOBS[spec.role]
    if spec.system == "http":
        from tamto_bench import http_jobs

        return http_jobs.JOBS[spec.role]
    raise ValueError(f"unknown benchmark system {spec.system!r}")


def _warm_up() -> None:
    """Pay pyarrow's one-off costs before any window opens.

    The first Arrow encode in a process takes over a second here (kernel and type
    registries initialise lazily); without this, the first job of every worker
    would measure that instead of the system.
    """
    import pyarrow.compute as pc

    from tamto_protocol.batch import BatchColumns, decode_batch, encode_batch

    n = 1000
    data = encode_batch(
        BatchColumns(
            payloads=[bytes(16)] * n,
            keys=[None] * n,
            headers=[None] * n,
            ids=[f"warm:{i}" for i in range(n)],
            event_times_us=[None] * n,
        )
    )
    pc.binary_slice(decode_batch(data).column("payload"), 0, 8).to_pylist()


def _worker_main(conn: Connection) -> None:
    """The loop of one worker process: run each job it is sent until told to stop."""
    # Import the heavy clients once, before the first job, outside any window.
    import grpc  # noqa: F401
    import nats  # noqa: F401
    import pyarrow  # noqa: F401

    import tamto_sdk  # noqa: F401
    from tamto_common.memory import freeze_startup_objects, keep_freed_memory

    # The same allocator and collector settings as the services, for every
    # system's clients.
    keep_freed_memory()
    _warm_up()
    freeze_startup_objects()
    conn.send(("up", None))
    # One event loop for the worker's life, not one per job: gRPC's aio poller binds
    # to every loop a channel or server was made on and keeps posting to it, so a job
    # per `asyncio.run` left it posting to closed loops ("Event loop is closed").
    with asyncio.Runner() as runner:
        while True:
            try:
                spec = conn.recv()
            except EOFError:
                return
            if spec is None:
                return
            try:
                result: JobResult = runner.run(_job(spec)(spec, Gate(conn)))
                conn.send(("done", result))
            except BaseException:
                conn.send(("error", traceback.format_exc()))
            finally:
                runner.run(_cancel_leftovers())


async def _cancel_leftovers() -> None:
    """Cancel and await what a job left running, as `asyncio.run` does at its end, so
    nothing of one job runs in the next one's window."""
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks() if task is not current]
    for task in leftovers:
        task.cancel()
    await asyncio.gather(*leftovers, return_exceptions=True)


class WorkerPool:
    """A fixed set of worker processes; `run` gives each of them at most one job."""

    def __init__(self, size: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs: list[BaseProcess] = []
        for i in range(size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_worker_main, args=(child,), name=f"tamto-bench-{i}", daemon=True
            )
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self._threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="bench-pool")

    async def started(self, timeout_s: float = _READY_TIMEOUT_S) -> None:
        """Wait until every worker has imported its clients.

        A worker still importing would steal CPU from the first measurement.
        """
        answers = await asyncio.gather(
            *(self._recv(c, timeout_s, "starting workers") for c in self._conns)
        )
        for kind, payload in answers:
            if kind != "up":
                raise BenchError(f"a benchmark worker failed to start: {payload}")

    @property
    def size(self) -> int:
        """How many workers there are."""
        return len(self._conns)

    @property
    def pids(self) -> list[int]:
        """The workers' process ids."""
        return [p.pid for p in self._procs if p.pid is not None]

    async def _recv(self, conn: Connection, timeout_s: float, what: str) -> tuple[str, Any]:
        def wait() -> tuple[str, Any]:
            if not conn.poll(timeout_s):
                raise BenchError(f"{what}: a worker did not answer within {timeout_s:.0f}s")
            try:
                message: tuple[str, Any] = conn.recv()
            except EOFError:
                raise BenchError(f"{what}: a worker exited") from None
            return message

        return await asyncio.get_running_loop().run_in_executor(self._threads, wait)

    async def run(self, specs: list[JobSpec], what: str, timeout_s: float) -> list[JobResult]:
        """Run one job per spec at the same time; their windows open together."""
        if len(specs) > self.size:
            raise BenchError(f"{what}: {len(specs)} jobs but only {self.size} workers")
        conns = self._conns[: len(specs)]
        for conn, spec in zip(conns, specs, strict=True):
            conn.send(spec)
        readies = await asyncio.gather(*(self._recv(c, _READY_TIMEOUT_S, what) for c in conns))
        start = time.time() + _START_MARGIN_S
        failures: list[str] = []
        running: list[Connection] = []
        for conn, (kind, payload) in zip(conns, readies, strict=True):
            if kind == "ready":
                conn.send(start)
                running.append(conn)
            else:
                failures.append(str(payload))
        outcomes = await asyncio.gather(*(self._recv(c, timeout_s, what) for c in running))
        results: list[JobResult] = []
        for kind, payload in outcomes:
            if kind == "done":
                results.append(payload)
            else:
                failures.append(str(payload))
        if failures:
            raise BenchError(f"{what} failed in a worker:\n{failures[0]}")
        return results

    def close(self) -> None:
        """Stop every worker (politely, then for good)."""
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
