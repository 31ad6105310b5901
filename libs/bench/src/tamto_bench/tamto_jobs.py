"""Tamto workloads, run inside a worker process through the Python SDK."""

from __future__ import annotations

import array
import asyncio
import os
import time

import pyarrow as pa

import tamto_sdk
from tamto_bench.gate import Gate
from tamto_bench.receiving import consume_loop
from tamto_bench.spec import JobResult, JobSpec
from tamto_bench.timing import batch_stamps, paced, wait_for_start
from tamto_sdk import Start, SubscriptionType

#: Sends between two yields to the event loop (`send` only enqueues and rarely yields).
_YIELD_EVERY = 256
_FLUSH_TIMEOUT_S = 30.0


def _stamps(batch: tamto_sdk.MessageBatch) -> list[int]:
    return batch_stamps(batch.record_batch)


async def publish(spec: JobSpec, gate: Gate) -> JobResult:
    """Publish as fast as the window allows (or at `spec.rate`); count durable acks."""
    result = JobResult()
    client = await tamto_sdk.connect(spec.target, api_key=spec.api_key)
    async with client:
        producer = client.producer(
            spec.stream,
            linger_ms=spec.linger_ms,
            max_batch_messages=1000,
            max_pending_messages=spec.window,
        )
        await producer.start()
        start = await wait_for_start(await gate.ready())
        end = start + spec.duration_s
        result.started = time.time()

        done = result.ack_counter(start, end)

        if spec.batch_api:
            payloads = _payloads(spec.size, spec.batch_api)

            batch_done = result.ack_counter(start, end, spec.batch_api)
            while time.monotonic() < end:
                (await producer.send_batch(payloads)).add_done_callback(batch_done)
        elif spec.rate > 0:

            async def send(payload: bytes) -> None:
                (await producer.send(payload)).add_done_callback(done)

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
    for the window plus `idle_s` and records each message's publish→deliver time.
    """
    result = JobResult()
    client = await tamto_sdk.connect(spec.target, api_key=spec.api_key)
    async with client:
        consumer = client.consumer(
            spec.stream,
            "bench",
            type=SubscriptionType.SHARED,
            start=Start.earliest(),
            credits=spec.credits,
        )
        async with consumer:

            async def receive(timeout_s: float) -> tamto_sdk.MessageBatch:
                return await consumer.receive_batch(1000, timeout_s=timeout_s)

            async def ack(batch: tamto_sdk.MessageBatch) -> None:
                consumer.ack(batch)

            await consume_loop(spec, gate, result, receive, ack, _stamps)
            await consumer.flush_acks(timeout_s=_FLUSH_TIMEOUT_S)
    return result
