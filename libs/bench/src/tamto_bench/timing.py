"""Clock helpers shared by the jobs: a common start, paced sending, time-stamped payloads."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable

_STAMP = struct.Struct("<q")
#: How often a paced publisher wakes up to send what is due.
TICK_S = 0.001


async def wait_for_start(start_wall: float) -> float:
    """Sleep until the wall-clock start time; return it on the monotonic clock."""
    start = time.monotonic() + (start_wall - time.time())
    delay = start - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    return start


def stamped(size: int) -> bytes:
    """A payload of `size` bytes (at least 8) that starts with the current time in ns."""
    return _STAMP.pack(time.time_ns()) + bytes(max(0, size - _STAMP.size))


def stamp_of(payload: bytes) -> int:
    """The send time (ns since the epoch) a `stamped` payload carries."""
    value: int = _STAMP.unpack_from(payload)[0]
    return value


async def paced(
    rate: float, start: float, end: float, send: Callable[[bytes], Awaitable[None]], size: int
) -> int:
    """Call `send(stamped payload)` `rate` times a second between two monotonic times."""
    sent = 0
    while True:
        now = time.monotonic()
        if now >= end:
            return sent
        due = int((now - start) * rate)
        while sent < due:
            await send(stamped(size))
            sent += 1
        await asyncio.sleep(TICK_S)


def in_window(start: float, end: float) -> bool:
    """Whether the monotonic clock is now between `start` and `end`."""
    return start <= time.monotonic() <= end
