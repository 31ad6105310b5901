"""The loop-lag monitor sees a blocking step, and only that."""

from __future__ import annotations

import asyncio
import time

from tamto_common.loop_lag import LoopLagMonitor
from tamto_testing.waiting import eventually


async def test_a_step_that_holds_the_loop_shows_as_lag() -> None:
    async with LoopLagMonitor(interval_s=0.01, warn_s=10) as monitor:
        await asyncio.sleep(0.05)
        assert monitor.max_lag_s < 0.15, "nothing held the loop yet"
        time.sleep(0.3)  # noqa: ASYNC251 - the blocking step under test: holds the loop 0.3 s
        await eventually(lambda: monitor.max_lag_s >= 0.25, 2, "the lag to be measured")
