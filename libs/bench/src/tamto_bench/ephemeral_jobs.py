"""Ephemeral-stream and request/reply workloads, and their core NATS peers (nats-py).

Run inside a worker process (see `pool`). The two systems do the same things:

- pub/sub: publishers as fast as they can (or at `spec.rate`, stamped), subscribers
  in one group (`spec.group`; core NATS: a queue group) counting deliveries in the
  window, with publish→deliver latencies when asked;
- fan-out: each subscriber worker holds `spec.subscribers` subscriptions without a
  group, each receiving everything;
- request/reply: `spec.window` requests in flight per requester, a replier that
  echoes the payload; round trips are counted and timed (`latencies_ns`);
- one at a time ("ping"): one worker publishes a message and awaits its delivery
  before the next, each publish→deliver timed: the path's latency with nothing
  queued behind it.
"""

from __future__ import annotations

import asyncio
import functools
import time

from nats.aio.msg import Msg

import tamto_sdk
from tamto_bench.gate import Gate
from tamto_bench.nats_jobs import connected, run_core_push, subject_of
from tamto_bench.receiving import PushWindow, request_loops
from tamto_bench.spec import JobResult, JobSpec
from tamto_bench.timing import (
    batch_stamps,
    flat_out,
    in_window,
    paced,
    wait_for_start,
    warmup_end_ns,
)

_FLUSH_TIMEOUT_S = 30.0
_REQUEST_TIMEOUT_S = 5.0


async def eph_publish(spec: JobSpec, gate: Gate) -> JobResult:
    """Publish to an ephemeral stream (SDK batching per topic); count what was sent."""
    result = JobResult()
    async with tamto_sdk.connect(spec.target, api_key=spec.api_key) as client:
        async with client.ephemeral_producer(spec.stream, max_pending=spec.window) as producer:
            start = await wait_for_start(await gate.ready())
            end = start + spec.duration_s
            result.started = time.time()

            async def send(payload: bytes) -> None:
                await producer.send(payload, topic="bench.load")

            if spec.rate > 0:
                result.total = await paced(spec.rate, start, end, send, spec.size)
            else:
                flat = functools.partial(producer.send, topic="bench.load")
                result.total = await flat_out(end, flat, spec.size)
            result.in_window = result.total
            await asyncio.wait_for(producer.flush(), _FLUSH_TIMEOUT_S)
            result.last = time.time()
    return result


async def eph_subscribe(spec: JobSpec, gate: Gate) -> JobResult:
    """`spec.subscribers` subscriptions (in `spec.group`, if any) counting deliveries."""
    result = JobResult()
    async with tamto_sdk.connect(spec.target, api_key=spec.api_key) as client:
        subs = [
            await client.subscribe(spec.stream, match="bench.#", group=spec.group).start()
            for _ in range(spec.subscribers)
        ]
        start_wall = await gate.ready()
        result.started = start_wall
        warm_ns = warmup_end_ns(start_wall, spec.duration_s)
        start = await wait_for_start(start_wall)

        async def read(sub: tamto_sdk.EphemeralSubscription) -> None:
            async for batch in sub.batches():
                result.record(
                    len(batch),
                    in_window(start, start + spec.duration_s),
                    batch_stamps(batch.record_batch) if spec.latency else (),
                    time.time_ns(),
                    warm_ns,
                )

        readers = [asyncio.create_task(read(sub)) for sub in subs]
        await asyncio.sleep(max(0.0, start + spec.duration_s + spec.idle_s - time.monotonic()))
        for task in readers:
            task.cancel()
        result.errors = sum(sub.dropped for sub in subs)
    return result


async def eph_request(spec: JobSpec, gate: Gate) -> JobResult:
    """`spec.window` request loops; each round trip counted and timed."""
    result = JobResult()
    async with tamto_sdk.connect(spec.target, api_key=spec.api_key) as client:

        async def ask(payload: bytes) -> None:
            await client.request(
                spec.stream, payload, topic="bench.rpc", timeout_s=_REQUEST_TIMEOUT_S
            )

        await request_loops(spec, gate, result, ask)
    return result


async def eph_reply(spec: JobSpec, gate: Gate) -> JobResult:
    """Answer every request with its own payload until the window (and idle) ends."""
    result = JobResult()
    async with tamto_sdk.connect(spec.target, api_key=spec.api_key) as client:
        handler = client.reply_handler(
            spec.stream, lambda m: m.payload, match="bench.rpc", group="bench", concurrency=64
        )
        async with handler:
            start = await wait_for_start(await gate.ready())
            await asyncio.sleep(max(0.0, start + spec.duration_s + spec.idle_s - time.monotonic()))
        result.total = handler.answered
        result.errors = handler.failed + handler.expired
    return result


async def core_fan_out(spec: JobSpec, gate: Gate) -> JobResult:
    """`spec.subscribers` plain core NATS subscriptions, each receiving everything."""
    result = JobResult()
    async with connected(spec.target) as nc:
        window = PushWindow()

        async def on_message(msg: Msg) -> None:
            result.total += 1
            result.last = time.time()
            if window.start <= time.monotonic() <= window.end:
                result.in_window += 1

        await run_core_push(
            nc, spec, gate, result, window, on_message, subscriptions=spec.subscribers
        )
    return result


async def core_request(spec: JobSpec, gate: Gate) -> JobResult:
    """Core NATS request/reply (`nc.request`), `spec.window` loops."""
    result = JobResult()
    async with connected(spec.target) as nc:

        async def ask(payload: bytes) -> None:
            await nc.request(subject_of(spec.stream), payload, timeout=_REQUEST_TIMEOUT_S)

        await request_loops(spec, gate, result, ask)
    return result


async def core_reply(spec: JobSpec, gate: Gate) -> JobResult:
    """A core NATS replier (queue group) echoing each request."""
    result = JobResult()
    async with connected(spec.target) as nc:

        async def on_request(msg: Msg) -> None:
            await msg.respond(msg.data)
            result.total += 1

        await nc.subscribe(subject_of(spec.stream), queue="bench", cb=on_request)
        await nc.flush()
        start = await wait_for_start(await gate.ready())
        await asyncio.sleep(max(0.0, start + spec.duration_s + spec.idle_s - time.monotonic()))
    return result


async def eph_ping(spec: JobSpec, gate: Gate) -> JobResult:
    """Publish one message (SDK producer), await its delivery, then the next."""
    result = JobResult()
    async with tamto_sdk.connect(spec.target, api_key=spec.api_key) as client:
        async with client.subscribe(spec.stream, match="bench.#") as sub:
            async with client.ephemeral_producer(spec.stream) as producer:

                async def ask(payload: bytes) -> None:
                    await producer.send(payload, topic="bench.ping")
                    await asyncio.wait_for(sub.receive_batch(), _REQUEST_TIMEOUT_S)

                await request_loops(spec, gate, result, ask)
    return result


async def core_ping(spec: JobSpec, gate: Gate) -> JobResult:
    """Publish one message on core NATS, await its delivery (another connection), then
    the next."""
    result = JobResult()
    async with connected(spec.target) as publisher, connected(spec.target) as subscriber:
        received: asyncio.Queue[Msg] = asyncio.Queue()
        await subscriber.subscribe(subject_of(spec.stream), cb=received.put)
        await subscriber.flush()

        async def ask(payload: bytes) -> None:
            await publisher.publish(subject_of(spec.stream), payload)
            await asyncio.wait_for(received.get(), _REQUEST_TIMEOUT_S)

        await request_loops(spec, gate, result, ask)
    return result


JOBS = {
    ("ephemeral", "pub"): eph_publish,
    ("ephemeral", "sub"): eph_subscribe,
    ("ephemeral", "req"): eph_request,
    ("ephemeral", "rep"): eph_reply,
    ("ephemeral", "ping"): eph_ping,
    ("core", "fan"): core_fan_out,
    ("core", "req"): core_request,
    ("core", "rep"): core_reply,
    ("core", "ping"): core_ping,
}
