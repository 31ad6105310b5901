"""Tamto workloads, run inside a worker process through the Python SDK.

Besides the throughput and latency workloads (`publish`, `consume`), the everyday
calls: `publish_sequential` (`send_and_wait`, one after another) and
`consume_per_message` (`async for` with an `ack` per message).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import time
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

import tamto_sdk
from tamto_bench.gate import Gate
from tamto_bench.receiving import consume_loop, request_loops
from tamto_bench.spec import JobResult, JobSpec
from tamto_bench.timing import (
    batch_stamps,
    in_window,
    paced,
    stamp_of,
    wait_for_start,
    warmup_end_ns,
)
from tamto_sdk import Start, SubscriptionType

#: Sends between two yields to the event loop (`send` only enqueues and rarely yields).
_YIELD_EVERY = 256
_FLUSH_TIMEOUT_S = 30.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _stamps(batch: tamto_sdk.MessageBatch) -> list[int]:
    return batch_stamps(batch.record_batch)


def _sequenced(batch: tamto_sdk.MessageBatch) -> int:
    """When the router sequenced `batch` (its publish time), in ns since the epoch."""
    return (batch.publish_time - _EPOCH) // _MICROSECOND * 1000


async def publish(spec: JobSpec, gate: Gate) -> JobResult:
    """Publish as fast as the window allows (or at `spec.rate`); count durable acks."""
    result = JobResult()
    client = await tamto_sdk.connect(spec.target, api_key=spec.api_key)
    async with client:
        producer = client.producer(
            spec.stream,
            linger_s=spec.linger_ms / 1000,
            max_batch_messages=1000,
            max_pending_messages=spec.window,
        )
        await producer.start()
        start_wall = await gate.ready()
        start = await wait_for_start(start_wall)
        end = start + spec.duration_s
        result.started = time.time()

        done = result.ack_counter(start, end)

        if spec.batch_api:
            payloads = _payloads(spec.size, spec.batch_api)

            batch_done = result.ack_counter(start, end, spec.batch_api)
            while time.monotonic() < end:
                (await producer.send_batch(payloads)).add_done_callback(batch_done)
        elif spec.rate > 0:
            # Paced (the latency phase): each message's publish→durable-ack time too,
            # which splits the consumers' publish→deliver into its publish side.
            timed = result.timed_acks(start, end, warmup_end_ns(start_wall, spec.duration_s))

            async def send(payload: bytes) -> None:
                (await producer.send(payload)).add_done_callback(timed(stamp_of(payload)))

            await paced(spec.rate, start, end, send, spec.size)
        else:
            payload = os.urandom(spec.size)
            while time.monotonic() < end:
                for _ in range(_YIELD_EVERY):
                    (await producer.send(payload)).add_done_callback(done)
                await asyncio.sleep(0)
        await asyncio.wait_for(producer.flush(), _FLUSH_TIMEOUT_S)
        result.last = time.time()
    return result


def _payloads(size: int, count: int) -> pa.Array:
    """`count` random payloads of `size` bytes as one binary array (built from buffers)."""
    offsets = array.array("i", range(0, size * count + 1, size))
    data = pa.py_buffer(os.urandom(size) * count)
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), data])


async def consume(spec: JobSpec, gate: Gate) -> JobResult:
    """Receive and ack through a shared subscription.

    Without `latency` it drains the stream: it stops after `idle_s` without a
    message, and `last` is when the last message arrived. With `latency` it runs
    for the window plus `idle_s` and records each message's publish→deliver time,
    and the part of it from the router's sequencing on (the deliver side).
    """
    result = JobResult()
    client = await tamto_sdk.connect(spec.target, api_key=spec.api_key)
    async with client:
        consumer = client.consumer(
            spec.stream,
            "bench",
            subscription_type=SubscriptionType.SHARED,
            start=Start.earliest(),
            credits=spec.credits,
        )
        async with consumer:

            async def receive(timeout_s: float) -> tamto_sdk.MessageBatch:
                return await consumer.receive_batch(1000, timeout_s=timeout_s)

            async def ack(batch: tamto_sdk.MessageBatch) -> None:
                consumer.ack(batch)

            await consume_loop(spec, gate, result, receive, ack, _stamps, _sequenced)
            await consumer.flush_acks(timeout_s=_FLUSH_TIMEOUT_S)
    return result


async def publish_sequential(spec: JobSpec, gate: Gate) -> JobResult:
    """`await producer.send_and_wait(payload)` one after another, each one timed."""
    result = JobResult()
    async with tamto_sdk.connect(spec.target, api_key=spec.api_key) as client:
        async with client.producer(spec.stream, linger_s=0) as producer:

            async def publish_one(payload: bytes) -> None:
                await producer.send_and_wait(payload)

            await request_loops(spec, gate, result, publish_one)
    return result


async def consume_per_message(spec: JobSpec, gate: Gate) -> JobResult:
    """`async for message in consumer: consumer.ack(message)` over the window.

    Its own subscription (`spec.group`) from the earliest position: it reads the
    backlog the publish phase left, for the window at most (a backlog that runs out
    earlier ends the job after `idle_s` without a message)."""
    result = JobResult()
    async with tamto_sdk.connect(spec.target, api_key=spec.api_key) as client:
        consumer = client.consumer(
            spec.stream,
            spec.group,
            subscription_type=SubscriptionType.SHARED,
            start=Start.earliest(),
            credits=spec.credits,
        )
        async with consumer:
            start_wall = await gate.ready()
            start = await wait_for_start(start_wall)
            end = start + spec.duration_s
            result.started = start_wall

            async def iterate() -> None:
                async for message in consumer:
                    consumer.ack(message)
                    result.total += 1
                    result.last = time.time()
                    if in_window(start, end):
                        result.in_window += 1
                    elif time.monotonic() >= end:
                        return

            await _until_idle(iterate(), result, end, spec.idle_s)
            await consumer.flush_acks(timeout_s=_FLUSH_TIMEOUT_S)
    return result


async def _until_idle(
    work: Coroutine[Any, Any, None], result: JobResult, end: float, idle_s: float
) -> None:
    """Run `work` until it returns, the window (`end`, monotonic) is over, or nothing
    was counted in `result` for `idle_s` (a drained backlog: it never returns)."""
    task = asyncio.ensure_future(work)
    counted, quiet_since = -1, time.monotonic()
    while not task.done():
        await asyncio.wait([task], timeout=min(idle_s, 0.2))
        now = time.monotonic()
        if result.total != counted:
            counted, quiet_since = result.total, now
        limit = idle_s if result.total else max(4 * idle_s, 5.0)
        if now >= end + idle_s or now - quiet_since > limit:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return
    task.result()


JOBS = {
    "pub": publish,
    "sub": consume,
    "seq": publish_sequential,
    "iter": consume_per_message,
}
