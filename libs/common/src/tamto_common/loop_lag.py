"""How long the event loop was held: the measurement behind "no step of the loop
may hold it long enough to miss an etcd keep-alive".

A task sleeps `interval_s` at a time and measures how much later than asked it
woke up: that delay is how long something else held the loop. The longest delay
seen is exported as the gauge `tamto_event_loop_lag_max_seconds` (since the
process started), and every delay over `warn_s` is logged with the loop
thread's CPU time meanwhile (`loop_cpu_s`), which tells our own work holding
the loop from a process waiting for a core. Keep-alives run every
third of the lease TTL, so a lag near TTL x 2/3 would lose a lease.

Garbage collections are timed too (`gc.callbacks`): a full collection of a
large heap holds the GIL, and so every thread, for as long as it runs. The
longest is the gauge `tamto_gc_pause_max_seconds`; those over `warn_s` are logged
with their generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from typing import Any

import structlog
from prometheus_client import Gauge

from tamto_common.tasks import cancel_and_wait

log = structlog.get_logger(__name__)

#: Second-generation collections between two full ones in services that hold
#: crowds (router, gateway; Python's default is 10): measured with 10,000
#: consumers attaching, full collections took up to 3.1 s and held every thread,
#: the lease keep-alive thread too; at 1,000 none took over 0.5 s.
FULL_GC_EVERY = 1_000


def collect_fully_less_often() -> None:
    """At most one full garbage collection per `FULL_GC_EVERY` second-generation ones
    (the services that hold crowds call it at start-up)."""
    gc.set_threshold(*gc.get_threshold()[:2], FULL_GC_EVERY)


LAG_MAX = Gauge(
    "tamto_event_loop_lag_max_seconds",
    "Longest the event loop was held (a timer woke this much late), since the process started",
)
GC_PAUSE_MAX = Gauge(
    "tamto_gc_pause_max_seconds",
    "Longest garbage collection (it holds every thread), since the process started",
)


class LoopLagMonitor:
    """Measures event-loop lag while entered (an async context manager)."""

    def __init__(self, interval_s: float = 0.1, warn_s: float = 0.5) -> None:
        self._interval_s = interval_s
        self._warn_s = warn_s
        self._task: asyncio.Task[None] | None = None
        self.max_lag_s = 0.0
        self.max_gc_s = 0.0
        self._gc_began = 0.0

    async def __aenter__(self) -> LoopLagMonitor:
        self._task = asyncio.create_task(self._run(), name="loop-lag")
        gc.callbacks.append(self._on_gc)
        return self

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_began = time.monotonic()
            return
        pause = time.monotonic() - self._gc_began
        if pause > self.max_gc_s:
            self.max_gc_s = pause
            GC_PAUSE_MAX.set(pause)
        if pause > self._warn_s:
            log.warning(
                "garbage collection held every thread",
                seconds=round(pause, 3),
                generation=info.get("generation"),
                collected=info.get("collected"),
            )

    async def __aexit__(self, *exc_info: object) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_gc)
        await cancel_and_wait(self._task)

    async def _run(self) -> None:
        while True:
            asked = time.monotonic() + self._interval_s
            cpu_began = time.thread_time()
            await asyncio.sleep(self._interval_s)
            lag = max(0.0, time.monotonic() - asked)
            if lag > self.max_lag_s:
                self.max_lag_s = lag
                LAG_MAX.set(lag)
            if lag > self._warn_s:
                # The loop thread's CPU over the interval and the lag: near their sum,
                # our own work held the loop; far below, the thread waited (for a
                # core on a saturated machine, or for the GIL).
                cpu = time.thread_time() - cpu_began
                log.warning("event loop held", seconds=round(lag, 3), loop_cpu_s=round(cpu, 3))
