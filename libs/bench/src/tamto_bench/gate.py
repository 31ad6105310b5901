"""The start protocol as a job sees it: report ready, then learn the common start time.

Its own module so that the jobs (`tamto_jobs`, `nats_jobs`, `ceiling`) need not
import `pool`, which loads them: that was an import cycle.
"""

from __future__ import annotations

import asyncio
from multiprocessing.connection import Connection


class Gate:
    """A job's handle on the start protocol: `ready()` returns the common start time."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def ready(self) -> float:
        """Report setup done and wait for the phase's start time (wall clock)."""
        self._conn.send(("ready", None))
        start: float = await asyncio.get_running_loop().run_in_executor(None, self._conn.recv)
        return start
