"""The loop-lag monitor sees a blocking step, and only that."""

from __future__ import annotations

import asyncio
import gc
import time

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
