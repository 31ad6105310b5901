"""Every asyncio task's stack, logged on SIGUSR1: where a running service waits.

A call that never finishes (one consumer of a crowd of 10,000 whose
stream never attached) shows no error and no log line; what it waits on is only
visible in the task's stack. `kill -USR1 <pid>` of any Tamto service logs one
`task stacks` line per task (its name, its coroutine and where each frame of it
is suspended), and one line counting the tasks per place they wait, the
quickest view of thousands of tasks. It changes nothing in the running service.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import structlog

log = structlog.get_logger(__name__)

#: Most tasks logged one by one (the count per place covers them all).
MOST_LOGGED = 200


def where(task: asyncio.Task[object]) -> list[str]:
    """`file:line in function` of each frame of `task`'s stack, outermost first."""
    return [
        f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"
        for f in task.get_stack(limit=30)
    ]


def log_task_stacks() -> None:
    """Log every task's stack and the number of tasks suspended at each place."""
    tasks = list(asyncio.all_tasks())
    places: Counter[str] = Counter()
    for n, task in enumerate(tasks):
        stack = where(task)
        places[stack[-1] if stack else "(not started)"] += 1
        if n < MOST_LOGGED:
            log.warning("task stack", task=task.get_name(), stack=stack)
    log.warning("task stacks", tasks=len(tasks), waiting_at=dict(places.most_common(40)))


def log_task_stacks_on_sigusr1(loop: asyncio.AbstractEventLoop) -> None:
    """Install `log_task_stacks` as `loop`'s SIGUSR1 handler."""
    loop.add_signal_handler(signal.SIGUSR1, log_task_stacks)
