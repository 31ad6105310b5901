"""How long the event loop was held: the measurement behind "no step of the loop
may hold it long enough to miss an etcd keep-alive".

A task sleeps `interval_s` at a time and measures how much later than asked it
woke up: that delay is how long something else held the loop. The longest delay
seen is exported as the gauge `tamto_event_loop_lag_max_seconds` (since the
process started), and every delay over `warn_s` is logged. Keep-alives run every
third of the lease TTL, so a lag near TTL x 2/3 would lose a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog
from prometheus_client import Gauge

log = structlog.get_logger(__name__)

LAG_MAX = Gauge(
    "tamto_event_loop_lag_max_seconds",
    "Longest the event loop was held (a timer woke this much late), since the process started",
)


class LoopLagMonitor:
    """Measures event-loop lag while entered (an async context manager)."""

    def __init__(self, interval_s: float = 0.1, warn_s: float = 0.5) -> None:
        self._interval_s = interval_s
        self._warn_s = warn_s
        self._task: asyncio.Task[None] | None = None
        self.max_lag_s = 0.0

    async def __aenter__(self) -> LoopLagMonitor:
        self._task = asyncio.create_task(self._run(), name="loop-lag")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            asked = time.monotonic() + self._interval_s
            await asyncio.sleep(self._interval_s)
            lag = max(0.0, time.monotonic() - asked)
            if lag > self.max_lag_s:
                self.max_lag_s = lag
                LAG_MAX.set(lag)
            if lag > self._warn_s:
                log.warning("event loop held", seconds=round(lag, 3))
