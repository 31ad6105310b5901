"""`kill -USR1` of a service logs where each of its tasks waits (tamto_common.task_stacks)."""

from __future__ import annotations

import asyncio
import os
import signal

from structlog.testing import capture_logs

from tamto_common.task_stacks import log_task_stacks_on_sigusr1


async def _waits_for_a_credit_that_never_comes(never: asyncio.Event) -> None:
    await never.wait()


async def test_sigusr1_logs_each_task_and_the_place_it_waits() -> None:
    never = asyncio.Event()
    stuck = [asyncio.create_task(_waits_for_a_credit_that_never_comes(never)) for _ in range(3)]
    await asyncio.sleep(0)  # let them reach their wait
    loop = asyncio.get_running_loop()
    log_task_stacks_on_sigusr1(loop)
    try:
        with capture_logs() as logs:
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(500):  # the handler runs on a later loop round
                if any(e["event"] == "task stacks" for e in logs):
                    break
                await asyncio.sleep(0.01)
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        for task in stuck:
            task.cancel()
    summary = next(e for e in logs if e["event"] == "task stacks")
    places = [p for p in summary["waiting_at"] if "_waits_for_a_credit_that_never_comes" in p]
    assert len(places) == 1, summary["waiting_at"]
    assert summary["waiting_at"][places[0]] == 3
    stacks = [e["stack"] for e in logs if e["event"] == "task stack"]
    assert sum("_waits_for_a_credit_that_never_comes" in s[-1] for s in stacks) == 3
