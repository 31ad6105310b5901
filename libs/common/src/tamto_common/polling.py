"""Polling a condition against a deadline: the one implementation behind every wait.

The launcher's `tamto_local.infra.wait_until`, the tests' async
`tamto_testing.waiting.eventually` and blocking `tamto_testing.processes.wait_for`
differ only in what they do on a check's exception, what they raise at the deadline
and how they sleep; the loop's decisions (done? retry? give up?) are `_Poll`'s, shared
by `poll` (async) and `poll_blocking`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass
class _Poll:
    timeout_s: float
    what: str
    retry_errors: bool
    error: type[Exception]
    started: float = field(default_factory=time.monotonic)

    def done(self, result: object) -> bool:
        """True when `result` (a check's value or the exception it raised) ends the wait;
        raises the check's exception (unless retried) or `error` once the deadline passed."""
        if isinstance(result, Exception):
            if not self.retry_errors:
                raise result
            result = False
        if result:
            return True
        if time.monotonic() - self.started > self.timeout_s:
            raise self.error(f"not within {self.timeout_s:g}s: {self.what}")
        return False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


async def poll(
    check: Callable[[], bool | Awaitable[bool]],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.02,
    retry_errors: bool = False,
    error: type[Exception] = AssertionError,
) -> float:
    """Poll `check` (plain or async) until true; the seconds it took. `error` naming `what`
    after `timeout_s`; with `retry_errors`, a check that raises counts as not yet true."""
    state = _Poll(timeout_s, what, retry_errors, error)
    while True:
        try:
            result: object = check()
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            result = exc
        if state.done(result):
            return state.elapsed
        await asyncio.sleep(interval_s)


def poll_blocking(
    check: Callable[[], bool],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.05,
    retry_errors: bool = False,
    error: type[Exception] = AssertionError,
) -> float:
    """`poll` for code without an event loop (it sleeps the thread)."""
    state = _Poll(timeout_s, what, retry_errors, error)
    while True:
        try:
            result: object = check()
        except Exception as exc:
            result = exc
        if state.done(result):
            return state.elapsed
        time.sleep(interval_s)
