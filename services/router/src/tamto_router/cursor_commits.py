"""A subscription's cursor committed to storage in the background, coalesced.

Acks change the subscription's in-memory `AckSet` at once (delivery moves on
without waiting for a disk), and this commits the cursor behind them: at most
one commit in flight, and after one, the next waits up to `interval_s` so that
the acks of many ack requests share one commit (a cursor commit is a storage
round trip and two fsyncs). Anything not yet committed when a router dies is
redelivered, which at-least-once delivery allows; `flush` makes what was acked
so far durable, and a consumer's clean leave uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from tamto_common.errors import TamtoError
from tamto_router.acks import AckSet

log = structlog.get_logger(__name__)

Commit = Callable[[AckSet], Awaitable[None]]

#: Pause before committing again after a failed commit.
RETRY_S = 0.5
#: Longest wait for the last commit when closing.
FINAL_COMMIT_S = 2.0


class CursorCommits:
    def __init__(self, acks: AckSet, commit: Commit, interval_s: float, name: str) -> None:
        self._acks = acks
        self._commit = commit
        self._interval = interval_s
        self._name = name
        self._changed = 0  # bumped by every change
        self._committed = 0  # the change count the last successful commit covered
        self._failures = 0
        self._error: TamtoError | None = None
        self._wake = asyncio.Event()
        self._urgent = asyncio.Event()
        self._progress = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pending(self) -> bool:
        """Whether acks are waiting to be committed."""
        return self._committed < self._changed

    def changed(self) -> None:
        """The acks changed: commit them soon."""
        self._changed += 1
        self._wake.set()
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name=f"cursor-{self._name}")

    async def flush(self) -> None:
        """Return once everything acked before the call is committed.

        Raises the error of a commit that failed meanwhile.
        """
        target, failures = self._changed, self._failures
        if self._committed >= target:
            return
        if self._task is None or self._task.done():
            await self._commit_now(target)
            return
        self._urgent.set()
        self._wake.set()
        async with self._progress:
            await self._progress.wait_for(
                lambda: self._committed >= target or self._failures > failures or self._closed
            )
        if self._committed >= target:
            return
        if self._error is not None and self._failures > failures:
            raise self._error
        await self._commit_now(target)  # closed meanwhile

    async def _commit_now(self, target: int) -> None:
        await self._commit(self._acks.copy())
        await self._settle(committed=target)

    async def _settle(self, committed: int = 0, error: TamtoError | None = None) -> None:
        async with self._progress:
            self._committed = max(self._committed, committed)
            if error is not None:
                self._error = error
                self._failures += 1
            self._progress.notify_all()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self.pending:
                continue
            covered = self._changed
            try:
                await self._commit(self._acks.copy())
            except TamtoError as exc:
                # Storage is restarting or the partition moved: the acks stay in
                # memory and go with the next commit (or are redelivered).
                log.warning("cursor commit failed", subscription=self._name, error=str(exc))
                await self._settle(error=exc)
                self._wake.set()
                await asyncio.sleep(RETRY_S)
                continue
            await self._settle(committed=covered)
            if self.pending and not self._urgent.is_set() and self._interval > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval):  # not wait_for: see close
                        await self._urgent.wait()
            self._urgent.clear()

    async def close(self) -> None:
        """Stop, after committing what is pending (best effort: the partition may
        have moved, and then the new owner's cursor is the one that counts)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._settle()  # waiting flushes commit themselves now
        if self.pending:
            try:
                # Bounded: reopening a failed partition waits for this.
                async with asyncio.timeout(FINAL_COMMIT_S):
                    await self._commit_now(self._changed)
            except (TamtoError, TimeoutError) as exc:
                log.warning("final cursor commit failed", subscription=self._name, error=str(exc))
