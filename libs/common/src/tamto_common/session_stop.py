"""How the reader of a consume session's queue learns that the session is to stop.

A consume session (the router's, and the gateway's fan-out over routers) hands its
client what arrives on a queue, read by one loop (`drain`) with no task per item.
The session stops when a request of the client breaks a rule (`fail`) or when the
task reading the client's requests ends (`stop_when_done`): either puts `WAKE` on
the queue (`_wake`), so that a reader waiting on it looks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

from tamto_common.errors import TamtoError, Unavailable

#: Put on a session's queue to wake its reader when the session is to stop.
WAKE = Unavailable("consume session stopped")

T = TypeVar("T")


class SessionStop:
    """Mixin: the stop of a session whose queue `drain` reads; the class sets
    `failure` and `_stopped` to None and says how to put `WAKE` on its queue."""

    #: The error a request of the client caused (the session then ends with it).
    failure: TamtoError | None
    _stopped: asyncio.Task[None] | None

    def _wake(self) -> None:
        raise NotImplementedError

    def fail(self, error: TamtoError) -> None:
        """End the reader with `error` (a request of the client broke a rule)."""
        self.failure = error
        self._wake()

    def stop_when_done(self, task: asyncio.Task[None]) -> None:
        """End the reader as soon as `task` (reading the client's requests) ends,
        raising its error if it failed."""

        def stop(_: asyncio.Task[None]) -> None:
            self._stopped = task
            self._wake()

        task.add_done_callback(stop)

    async def drain(self, queue: asyncio.Queue[T | BaseException]) -> AsyncIterator[T]:
        """What `queue` holds, in order, until the session stops; an exception taken
        from it is raised. Taken straight from the queue: no task per item, so an
        item waits for no more event-loop rounds than it must."""
        while True:
            if self.failure is not None:
                raise self.failure
            if self._stopped is not None:
                self._stopped.result()
                return
            item = await queue.get()
            if item is WAKE:
                continue
            if isinstance(item, BaseException):
                raise item
            yield item
