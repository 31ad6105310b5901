"""A starting service reaches etcd and NATS as soon as they answer, not after tens of seconds.

A service may start while etcd or NATS is down, restarting or paused: the
launcher restarts every process it supervises, and a fault campaign faults them
back to back. Before this, a service gave up after 10 s without etcd, or on
the first failed etcd write of its start-up, and exited; the launcher then
started it from scratch (5-15 s of imports on a loaded machine), and in one
campaign a restarted auth took 58 s to serve. Now every first
contact (connecting, the service's first writes, registering) is retried with
the gRPC channels' reconnect policy (`tamto_protocol.reconnect`: 0.1 s growing
to 0.25 s between attempts, jittered) until `STARTUP_DEADLINE_S`, so a service
serves within a fraction of a second of its dependencies answering again.

Only errors that say "not reachable now" are retried (those
`tamto_common.grpc_errors.status_for` translates to UNAVAILABLE, and socket
errors and timeouts); any other error surfaces at once.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import structlog

from tamto_common.errors import Unavailable
from tamto_common.grpc_errors import status_for
from tamto_protocol.reconnect import INITIAL_RECONNECT_BACKOFF_MS, MAX_RECONNECT_BACKOFF_MS

T = TypeVar("T")
log = structlog.get_logger(__name__)

#: How long a starting service keeps trying to reach etcd and NATS before it
#: exits with "cannot start" (a supervisor then restarts it).
STARTUP_DEADLINE_S = 300.0
#: A failing dependency is logged again after this long, not on every attempt.
LOG_EVERY_S = 5.0


def transient(exc: BaseException) -> bool:
    """Whether `exc` says a dependency cannot be reached right now (retry) rather than a fault."""
    if isinstance(exc, (OSError, asyncio.TimeoutError)):
        return True
    status = status_for(exc)
    return status is not None and status[0] == grpc.StatusCode.UNAVAILABLE


def backoff_s(attempt: int) -> float:
    """Seconds to wait after failed attempt number `attempt` (0-based): the channels' policy."""
    base: float = (
        min(INITIAL_RECONNECT_BACKOFF_MS * 2 ** min(attempt, 8), MAX_RECONNECT_BACKOFF_MS) / 1000
    )
    return base * random.uniform(0.8, 1.2)


async def until_reachable(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    deadline_s: float = STARTUP_DEADLINE_S,
) -> T:
    """Run `attempt` until it succeeds, retrying transient failures until `deadline_s`.

    Logs "waiting for <what>" on the first failure (and every `LOG_EVERY_S`), and
    how long it waited once it succeeds; raises `Unavailable` at the deadline.
    """
    started = time.monotonic()
    logged = -LOG_EVERY_S
    failures = 0
    while True:
        try:
            result = await attempt()
        except Exception as exc:
            if not transient(exc):
                raise
            waited = time.monotonic() - started
            if waited > deadline_s:
                raise Unavailable(f"{what} not reachable within {deadline_s:g} s: {exc}") from exc
            if waited - logged >= LOG_EVERY_S:
                log.warning(f"waiting for {what}", waited_s=round(waited, 2), error=str(exc))
                logged = waited
            await asyncio.sleep(backoff_s(failures))
            failures += 1
            continue
        if failures:
            log.info(f"reached {what}", waited_s=round(time.monotonic() - started, 2))
        return result
