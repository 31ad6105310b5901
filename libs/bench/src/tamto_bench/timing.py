"""Clock helpers shared by the jobs: a common start, paced sending, time-stamped payloads."""

from __future__ import annotations

import asyncio
import os
import struct
import time
from collections.abc import Awaitable, Callable

import pyarrow as pa
import pyarrow.compute as pc

_STAMP = struct.Struct("<q")
#: How often a paced publisher wakes up to send what is due.
TICK_S = 0.001
#: Sends between two yields to the event loop, sending flat out (`flat_out`).
YIELD_EVERY = 256
#: Latency samples from the first part of the window are dropped (connections warm up).
WARMUP_FRACTION = 0.2


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


def batch_stamps(batch: pa.RecordBatch) -> list[int]:
    """The send times the `stamped` payloads of an Arrow batch carry (one column slice)."""
    return [stamp_of(raw) for raw in pc.binary_slice(batch.column("payload"), 0, 8).to_pylist()]


def warmup_end_ns(start_wall: float, duration_s: float) -> int:
    """Wall-clock ns before which latency samples are dropped (`WARMUP_FRACTION`)."""
    return int((start_wall + duration_s * WARMUP_FRACTION) * 1e9)


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


async def flat_out(end: float, send: Callable[[bytes], Awaitable[object]], size: int) -> int:
    """Call `send(payload)` (`size` random bytes) as fast as it goes until the monotonic
    `end`, yielding to the event loop every `YIELD_EVERY` sends; how many were sent."""
    payload = os.urandom(size)
    sent = 0
    while time.monotonic() < end:
        for _ in range(YIELD_EVERY):
            await send(payload)
        sent += YIELD_EVERY
        await asyncio.sleep(0)
    return sent
