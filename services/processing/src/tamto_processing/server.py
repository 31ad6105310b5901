"""Wiring of a processing node: the supervisor of the function instances placed on it."""

from __future__ import annotations

import asyncio
import contextlib

from tamto_common.service import Runtime
from tamto_processing.config import ProcessingConfig
from tamto_processing.node import Supervisor


async def setup(config: ProcessingConfig, runtime: Runtime) -> None:
    """Start the supervisor; it runs until the service stops."""
    supervisor = Supervisor(config, runtime.etcd)
    task = asyncio.create_task(supervisor.run(), name="function-supervisor")

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await supervisor.stop_all()

    runtime.resources.push_async_callback(stop)
