"""The loop-lag monitor sees a blocking step, and only that."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import MutableMapping
from typing import Any

import structlog

from tamto_common.loop_lag import LoopLagMonitor
from tamto_testing.waiting import eventually


async def test_a_step_that_holds_the_loop_shows_as_lag() -> None:
    async with LoopLagMonitor(interval_s=0.01, warn_s=10) as monitor:
        await asyncio.sleep(0.05)
        assert monitor.max_lag_s < 0.15, "nothing held the loop yet"
        time.sleep(0.3)  # noqa: ASYNC251 - the blocking step under test: holds the loop 0.3 s
        await eventually(lambda: monitor.max_lag_s >= 0.25, 2, "the lag to be measured")


async def test_garbage_collections_are_timed() -> None:
    async with LoopLagMonitor(interval_s=0.01, warn_s=10) as monitor:
        garbage = [[i] for i in range(200_000)]
        del garbage
        gc.collect()
        assert monitor.max_gc_s > 0.0


async def test_the_warning_tells_a_busy_loop_from_a_process_that_waited() -> None:
    """A hold of the loop by our own work uses the loop thread's CPU; a process that
    waits (here blocked in sleep, as when it waits for a core) uses none."""
    async with LoopLagMonitor(interval_s=0.01, warn_s=0.2) as monitor:
        with structlog.testing.capture_logs() as logs:
            await asyncio.sleep(0.05)
            time.sleep(0.3)  # noqa: ASYNC251 - holds the loop without using the CPU
            await eventually(lambda: len(held(logs)) == 1, 2, "a warning for the wait")
            ends = time.thread_time() + 0.3
            while time.thread_time() < ends:  # holds the loop, busy
                pass
            await eventually(lambda: len(held(logs)) == 2, 2, "a warning for the busy step")
    waited, busy = held(logs)
    assert waited["seconds"] >= 0.25
    assert waited["loop_cpu_s"] < 0.1
    assert busy["seconds"] >= 0.25
    assert busy["loop_cpu_s"] >= 0.25
    assert monitor.max_lag_s >= 0.25


def held(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == "event loop held"]
