"""NATS workloads (JetStream and core NATS), run inside a worker process through nats-py.

JetStream: publishers use `publish_async` with at most `window` unacknowledged
publishes (the counterpart of the Tamto producer's pending window); consumers
share one durable pull consumer with explicit acks, fetching up to 1,000 at a
time and acking every message. Core NATS: plain publish, and subscribers in one
queue group so each message is delivered once, like a Tamto shared subscription.
The everyday calls: `await js.publish` one after another, and a pull
consumer fetching 100 at a time with an `ack()` per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from tamto_bench.gate import Gate
from tamto_bench.receiving import PushWindow, consume_loop, request_loops
from tamto_bench.spec import JobResult, JobSpec
from tamto_bench.timing import flat_out, paced, stamp_of, wait_for_start

_FLUSH_TIMEOUT_S = 30.0
_FETCH = 1000
#: Messages per fetch of the per-message consuming row (JetStream's side of it).
_FETCH_PER_MESSAGE = 100


def subject_of(stream: str) -> str:
    """The subject a benchmark stream (or core NATS run) publishes on."""
    return f"bench.{stream}"


@contextlib.asynccontextmanager
async def connected(url: str, **options: Any) -> AsyncIterator[Any]:
    """A nats-py connection that does not reconnect (`options`: nats.connect's), closed
    on the way out."""
    nc = await nats.connect(url, max_reconnect_attempts=0, **options)
    try:
        yield nc
    finally:
        await nc.close()


def _connect(url: str) -> contextlib.AbstractAsyncContextManager[Any]:
    return connected(url, pending_size=64 * 1024 * 1024)


async def js_publish(spec: JobSpec, gate: Gate) -> JobResult:
    """Publish to a JetStream stream with windowed async acks; count the acks."""
    result = JobResult()
    async with _connect(spec.target) as nc:
        js = nc.jetstream(publish_async_max_pending=spec.window)
        subject = subject_of(spec.stream)
        start = await wait_for_start(await gate.ready())
        end = start + spec.duration_s
        result.started = time.time()

        done = result.ack_counter(start, end)

        async def send(payload: bytes) -> None:
            (await js.publish_async(subject, payload)).add_done_callback(done)

        if spec.rate > 0:
            await paced(spec.rate, start, end, send, spec.size)
        else:
            await flat_out(end, send, spec.size)
        await asyncio.wait_for(js.publish_async_completed(), _FLUSH_TIMEOUT_S)
        result.last = time.time()
    return result


async def js_consume(spec: JobSpec, gate: Gate) -> JobResult:
    """Fetch from the shared durable pull consumer and ack each message explicitly.

    For latency it uses a push consumer with a deliver group instead (JetStream's
    lowest-latency path; a pull loop with short fetches adds its own delay).
    """
    if spec.latency:
        return await _js_push_latency(spec, gate)
    return await _js_pull(spec, gate, "bench", _FETCH)


async def js_consume_per_message(spec: JobSpec, gate: Gate) -> JobResult:
    """The per-message consuming peer: its own durable pull consumer,
    `fetch(100)` and `ack()` each message, for the window at most."""
    return await _js_pull(spec, gate, spec.group, _FETCH_PER_MESSAGE)


async def js_publish_sequential(spec: JobSpec, gate: Gate) -> JobResult:
    """`await js.publish(subject, payload)` one after another, each one timed."""
    result = JobResult()
    async with _connect(spec.target) as nc:
        js = nc.jetstream()
        subject = subject_of(spec.stream)

        async def publish_one(payload: bytes) -> None:
            await js.publish(subject, payload)

        await request_loops(spec, gate, result, publish_one)
    return result


async def _js_pull(spec: JobSpec, gate: Gate, durable: str, fetch: int) -> JobResult:
    result = JobResult()
    async with _connect(spec.target) as nc:
        js = nc.jetstream()
        sub = await js.pull_subscribe(
            subject_of(spec.stream),
            durable=durable,
            stream=spec.stream,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                max_ack_pending=max((spec.credits or 0) * 4, 20_000),
                max_waiting=512,
            ),
        )

        async def receive(timeout_s: float) -> list[Msg]:
            try:
                msgs: list[Msg] = await sub.fetch(fetch, timeout=timeout_s)
            except (TimeoutError, nats.errors.TimeoutError):
                return []
            return msgs

        async def ack(msgs: list[Msg]) -> None:
            for msg in msgs:
                await msg.ack()

        await consume_loop(spec, gate, result, receive, ack, _stamps)
        await nc.flush(timeout=_FLUSH_TIMEOUT_S)
    return result


def _stamps(msgs: list[Msg]) -> list[int]:
    return [stamp_of(msg.data) for msg in msgs]


def push_consumer_config(stream: str) -> ConsumerConfig:
    """The durable push consumer the latency workers share (one deliver group)."""
    return ConsumerConfig(
        durable_name="bench",
        deliver_subject=f"_bench_deliver.{stream}",
        deliver_group="bench",
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        max_ack_pending=20_000,
    )


async def _js_push_latency(spec: JobSpec, gate: Gate) -> JobResult:
    result = JobResult()
    async with _connect(spec.target) as nc:
        js = nc.jetstream()
        window = PushWindow()

        async def on_message(msg: Msg) -> None:
            received_ns = time.time_ns()
            result.total += 1
            result.last = time.time()
            if window.start <= time.monotonic() <= window.end:
                result.in_window += 1
            sent_ns = stamp_of(msg.data)
            if sent_ns >= window.warm_ns:
                result.latencies_ns.append(received_ns - sent_ns)
            await msg.ack()

        # The parent created the durable push consumer (`push_consumer_config`);
        # every worker binds to it through the deliver group.
        await js.subscribe(
            subject_of(spec.stream),
            queue="bench",
            durable="bench",
            stream=spec.stream,
            cb=on_message,
            manual_ack=True,
            pending_msgs_limit=1_000_000,
        )
        await window.run(spec, gate, result)
    return result


async def core_publish(spec: JobSpec, gate: Gate) -> JobResult:
    """Publish on core NATS (fire and forget) as fast as possible or at `spec.rate`."""
    result = JobResult()
    async with _connect(spec.target) as nc:
        subject = subject_of(spec.stream)
        start = await wait_for_start(await gate.ready())
        end = start + spec.duration_s
        result.started = time.time()

        async def send(payload: bytes) -> None:
            await nc.publish(subject, payload)

        if spec.rate > 0:
            result.total = await paced(spec.rate, start, end, send, spec.size)
        else:
            result.total = await flat_out(end, functools.partial(nc.publish, subject), spec.size)
        result.in_window = result.total
        await nc.flush(timeout=_FLUSH_TIMEOUT_S)
        result.last = time.time()
    return result


async def core_subscribe(spec: JobSpec, gate: Gate) -> JobResult:
    """Receive on core NATS in a queue group; count deliveries (and latency if asked)."""
    result = JobResult()
    async with _connect(spec.target) as nc:
        window = PushWindow()

        async def on_message(msg: Msg) -> None:
            now = time.monotonic()
            result.total += 1
            result.last = time.time()
            if window.start <= now <= window.end:
                result.in_window += 1
            if spec.latency:
                sent_ns = stamp_of(msg.data)
                if sent_ns >= window.warm_ns:
                    result.latencies_ns.append(time.time_ns() - sent_ns)

        await run_core_push(nc, spec, gate, result, window, on_message, queue="bench")
    return result


async def run_core_push(
    nc: Any,
    spec: JobSpec,
    gate: Gate,
    result: JobResult,
    window: PushWindow,
    on_message: Callable[[Msg], Awaitable[None]],
    *,
    subscriptions: int = 1,
    queue: str = "",
) -> None:
    """Subscribe `on_message` to the run's core NATS subject `subscriptions` times (in
    `queue`, if any) with room for a whole run's backlog, then hold `window` open."""
    for _ in range(subscriptions):
        await nc.subscribe(
            subject_of(spec.stream),
            queue=queue,
            cb=on_message,
            pending_msgs_limit=1_000_000,
            pending_bytes_limit=1 << 30,
        )
    await nc.flush()
    await window.run(spec, gate, result)


JOBS = {
    ("jetstream", "pub"): js_publish,
    ("jetstream", "sub"): js_consume,
    ("jetstream", "seq"): js_publish_sequential,
    ("jetstream", "iter"): js_consume_per_message,
    ("core", "pub"): core_publish,
    ("core", "sub"): core_subscribe,
}
