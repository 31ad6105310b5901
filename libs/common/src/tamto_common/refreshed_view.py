"""A local copy of something kept in etcd, refreshed in the background.

Services keep such copies of what they consult on every request (the members of
the cluster, the placement decisions) instead of asking etcd each time. Each is
owned by the process that needs it, as an async context manager: entering it
reads the first copy, and a task refreshes it until the context exits. Readers
that must react to a change wait on `changed`, which is set (and replaced by a
fresh event) whenever a refresh finds something different.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Self

import structlog

from tamto_common.tasks import cancel_and_wait

log = structlog.get_logger(__name__)


class RefreshedView:
    """Base of the refreshed copies: subclasses implement `refresh` and may pace
    their refreshes (`next_wait_s`) and handle a failed one (`refresh_failed`)."""

    #: Named in the refresh task and in the log line of a failed refresh.
    what = "view"

    def __init__(self, interval_s: float) -> None:
        self._interval = interval_s
        self._task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()

    async def refresh(self) -> None:
        """Read the current copy from etcd (`announce_change` if it differs)."""
        raise NotImplementedError

    def announce_change(self) -> None:
        """Wake every waiter on `changed`; the next ones wait for the next change."""
        self.changed.set()
        self.changed = asyncio.Event()

    def next_wait_s(self) -> float:
        """How long to wait before the next refresh."""
        return self._interval

    def refresh_failed(self, exc: Exception, waited_s: float) -> None:
        """A background refresh failed (the copy stays as it was)."""
        log.warning(f"{self.what} refresh failed", error=str(exc))

    async def __aenter__(self) -> Self:
        await self.refresh()
        self._task = asyncio.create_task(self._loop(), name=self.what.replace(" ", "-"))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await cancel_and_wait(self._task)

    async def _loop(self) -> None:
        while True:
            wait_s = self.next_wait_s()
            await asyncio.sleep(wait_s)
            try:
                await self.refresh()
            except Exception as exc:
                self.refresh_failed(exc, wait_s)


async def next_change(views: Iterable[RefreshedView], timeout_s: float) -> None:
    """Until one of `views` changes, or `timeout_s` passes."""
    changes = [asyncio.ensure_future(view.changed.wait()) for view in views]
    try:
        await asyncio.wait(changes, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in changes:
            waiting.cancel()
