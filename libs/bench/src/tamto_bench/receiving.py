"""The consumer side of a benchmark job: one receive loop for every system; the window
of a job whose messages arrive in callbacks (`PushWindow`); and the one-call-at-a-time
loop (request/reply, ping, sequential publish).

Tamto's shared subscription and a JetStream pull consumer are measured alike: wait
for the common start, receive until the window and the idle time are over (or,
without latency sampling, until the stream stays quiet), count each batch and
sample its latencies, then ack it. What differs, how to receive, read the send
times and ack, comes in as functions.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sized
from typing import Any, TypeVar

from tamto_bench.gate import Gate
from tamto_bench.spec import JobResult, JobSpec
from tamto_bench.timing import WARMUP_FRACTION, in_window, wait_for_start, warmup_end_ns

B = TypeVar("B", bound=Sized)


async def consume_loop(
    spec: JobSpec,
    gate: Gate,
    result: JobResult,
    receive: Callable[[float], Awaitable[B]],
    ack: Callable[[B], Awaitable[None]],
    stamps: Callable[[B], Iterable[int]],
    sequenced: Callable[[B], int] | None = None,
) -> None:
    """Receive batches (`receive(timeout_s)`, empty when none came) into `result`.

    `stamps(batch)`, the send times its payloads carry, and `sequenced(batch)`, when
    the server sequenced it (wall-clock ns; for the deliver side of the latency), are
    read only with `spec.latency`."""
    start_wall = await gate.ready()
    start = await wait_for_start(start_wall)
    result.started = start_wall
    hard_end = start + spec.duration_s + spec.idle_s
    warm = warmup_end_ns(start_wall, spec.duration_s)
    last_seen = start
    while True:
        now = time.monotonic()
        # Idle means drained once something came; before that, allow for slow setup.
        idle_limit = spec.idle_s if result.total else max(4 * spec.idle_s, 5.0)
        if now >= hard_end or (not spec.latency and now - last_seen > idle_limit):
            return
        batch = await receive(max(0.01, min(0.2, hard_end - now)))
        if not len(batch):
            continue
        received_ns = time.time_ns()
        last_seen = time.monotonic()
        result.record(
            len(batch),
            in_window(start, start + spec.duration_s),
            stamps(batch) if spec.latency else (),
            received_ns,
            warm,
            sequenced(batch) if spec.latency and sequenced is not None else 0,
        )
        await ack(batch)


class PushWindow:
    """The measurement window of a job whose messages arrive in callbacks (core NATS,
    a JetStream push consumer): the callbacks count a message into the window when it
    arrives between `start` and `end` (monotonic; both 0 until `run` opens it), and
    sample latencies of payloads sent from `warm_ns` (wall clock) on."""

    __slots__ = ("end", "start", "warm_ns")

    def __init__(self) -> None:
        self.start = 0.0
        self.end = 0.0
        self.warm_ns = 0

    async def run(self, spec: JobSpec, gate: Gate, result: JobResult) -> None:
        """Wait for the common start, open the window, and return once it and the idle
        time are over."""
        start_wall = await gate.ready()
        result.started = start_wall
        self.warm_ns = warmup_end_ns(start_wall, spec.duration_s)
        start = await wait_for_start(start_wall)
        self.start, self.end = start, start + spec.duration_s
        await asyncio.sleep(spec.duration_s + spec.idle_s)


async def request_loops(
    spec: JobSpec,
    gate: Gate,
    result: JobResult,
    ask: Callable[[bytes], Coroutine[Any, Any, None]],
) -> None:
    """`spec.window` loops, each calling `ask(payload)` one after another until the
    window ends, counting the calls and timing those that finish after the warm-up
    (`latencies_ns`); a failed call counts as an error."""
    payload = os.urandom(spec.size)
    start = await wait_for_start(await gate.ready())
    end = start + spec.duration_s
    warm = start + spec.duration_s * WARMUP_FRACTION
    result.started = time.time()

    async def loop() -> None:
        while time.monotonic() < end:
            sent = time.monotonic_ns()
            try:
                await ask(payload)
            except Exception:
                result.errors += 1
                continue
            now = time.monotonic()
            result.total += 1
            if start <= now <= end:
                result.in_window += 1
            if now >= warm:
                result.latencies_ns.append(time.monotonic_ns() - sent)

    await asyncio.gather(*(loop() for _ in range(max(1, spec.window))))
    result.last = time.time()
