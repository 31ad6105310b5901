"""Stopping a background task: cancel it and wait until it has stopped.

Services, views and samplers run a task for their lifetime and stop it when they
close; waiting for it (its cancellation swallowed) is what makes "closed" mean that
nothing of it runs any more.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (if any) and wait until it has finished."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
