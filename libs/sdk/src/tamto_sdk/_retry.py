"""Exponential backoff with full jitter, bounded by a deadline (internal).

Attempt n waits a uniformly random time in [0, min(max backoff, initial * 2^n)]
("full jitter"): clients that failed together do not retry together, and the
wait after a peer comes back stays below `ClientOptions.retry_max_backoff_s`
(0.25 s by default), which with the channels' own reconnect backoff
(`tamto_protocol.reconnect`) keeps a client's return within a second.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tamto_sdk.errors import TamtoError
from tamto_sdk.options import ClientOptions

T = TypeVar("T")


class Backoff:
    """Tracks attempts of one retried operation against its deadline."""

    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + options.retry_deadline_s
        self._attempt = 0

    def remaining(self) -> float:
        """Seconds left before the deadline (may be negative)."""
        return self._deadline - self._loop.time()

    def next_delay(self) -> float | None:
        """The delay before the next attempt, or None when the deadline is spent."""
        cap = min(
            self._options.retry_max_backoff_s,
            self._options.retry_initial_backoff_s * (2**self._attempt),
        )
        self._attempt += 1
        delay = random.uniform(0, cap)
        remaining = self.remaining()
        if remaining <= 0:
            return None
        return min(delay, remaining)

    def reset(self) -> None:
        """Start over: a fresh deadline and the initial backoff."""
        self._deadline = self._loop.time() + self._options.retry_deadline_s
        self._attempt = 0


async def with_retries(
    operation: Callable[[], Awaitable[T]], options: ClientOptions, *, retry: bool = True
) -> T:
    """Run `operation`, retrying retriable `TamtoError`s with backoff until the deadline."""
    backoff = Backoff(options)
    while True:
        try:
            return await operation()
        except TamtoError as exc:
            if not retry or not exc.retriable:
                raise
            delay = backoff.next_delay()
            if delay is None:
                raise
            await asyncio.sleep(delay)
