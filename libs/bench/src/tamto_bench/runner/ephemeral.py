"""The ephemeral workloads, run on Tamto's ephemeral streams and on core NATS alike:
pub/sub throughput, fan-out, request/reply in several shapes and one message at a time."""

from __future__ import annotations

from tamto_bench.runner.context import Bench
from tamto_bench.runner.options import FAN_OUT, MB, REQUESTS_IN_FLIGHT
from tamto_bench.runner.stats import percentile


async def core_pubsub(bench: Bench, size: int) -> None:
    """Core NATS publish→deliver throughput: subscribers in one queue group."""
    o = bench.options
    stream = bench.stream("core", size)
    subs = [bench.spec("core", "sub", stream, size) for _ in range(o.consumers)]
    pubs = [bench.spec("core", "pub", stream, size) for _ in range(o.producers)]
    results = await bench.run("core NATS pub/sub", subs + pubs, o.duration_s + o.idle_s)
    delivered = sum(r.in_window for r in results[: len(subs)]) / o.duration_s
    published = sum(r.in_window for r in results[len(subs) :]) / o.duration_s
    bench.record(
        size,
        "core_nats",
        {
            "pubsub_msgs_s": delivered,
            "pubsub_mb_s": delivered * size / MB,
            "publish_msgs_s": published,
        },
    )


async def ephemeral_pubsub(bench: Bench, size: int) -> None:
    """Ephemeral publish→deliver throughput: subscribers in one group, as core NATS's
    pub/sub phase uses one queue group."""
    o = bench.options
    stream = bench.stream("eph", size)
    subs = [bench.spec("ephemeral", "sub", stream, size, group="bench") for _ in range(o.consumers)]
    pubs = [bench.spec("ephemeral", "pub", stream, size) for _ in range(o.producers)]
    async with bench.stream_on("ephemeral", stream):
        results = await bench.run("ephemeral pub/sub", subs + pubs, o.duration_s + o.idle_s)
    delivered = sum(r.in_window for r in results[: len(subs)]) / o.duration_s
    bench.record(
        size,
        "ephemeral",
        {
            "pubsub_msgs_s": delivered,
            "pubsub_mb_s": delivered * size / MB,
            "publish_msgs_s": sum(r.in_window for r in results[len(subs) :]) / o.duration_s,
            "dropped": sum(r.errors for r in results[: len(subs)]),
        },
    )


async def fan_out(bench: Bench, system: str, size: int) -> None:
    """One publisher, `FAN_OUT` consumers without a group over two workers."""
    o = bench.options
    stream = bench.stream("fan", size)
    role = "sub" if system == "ephemeral" else "fan"
    subs = [bench.spec(system, role, stream, size, subscribers=FAN_OUT // 2) for _ in range(2)]
    pubs = [bench.spec(system, "pub", stream, size)]
    async with bench.stream_on(system, stream):
        results = await bench.run(f"{system} fan-out", subs + pubs, o.duration_s + o.idle_s)
    delivered = sum(r.in_window for r in results[: len(subs)]) / o.duration_s
    bench.record(
        size,
        system,
        {
            f"fanout_{FAN_OUT}_deliveries_s": delivered,
            f"fanout_{FAN_OUT}_publish_msgs_s": results[-1].in_window / o.duration_s,
        },
    )


async def request_reply(
    bench: Bench,
    system: str,
    size: int,
    key: str = "rr",
    workers: int = 0,
    window: int = REQUESTS_IN_FLIGHT,
) -> None:
    """Round trips per second and their latency, recorded as `key`_per_s, _p50_ms,
    _p99_ms: one replier, `workers` requesters (0: `producers`) with `window`
    requests in flight each."""
    o = bench.options
    stream = bench.stream(key.replace("_", "-"), size)
    replier = [bench.spec(system, "rep", stream, size)]
    requesters = [
        bench.spec(system, "req", stream, size, window=window)
        for _ in range(workers or o.producers)
    ]
    async with bench.stream_on(system, stream):
        results = await bench.run(
            f"{system} request/reply", replier + requesters, o.duration_s + o.idle_s
        )
    samples = sorted(ns for r in results[1:] for ns in r.latencies_ns)
    bench.record(
        size,
        system,
        {
            f"{key}_per_s": sum(r.in_window for r in results[1:]) / o.duration_s,
            f"{key}_p50_ms": percentile(samples, 50) / 1e6,
            f"{key}_p99_ms": percentile(samples, 99) / 1e6,
            f"{key}_errors": sum(r.errors for r in results[1:]),
        },
    )


async def one_at_a_time(bench: Bench, system: str, size: int) -> None:
    """Publish→deliver of one message at a time (the next published once the last
    arrived): the path's own latency, nothing queued behind a message."""
    o = bench.options
    stream = bench.stream("ping", size)
    async with bench.stream_on(system, stream):
        results = await bench.run(
            f"{system} one at a time",
            [bench.spec(system, "ping", stream, size, window=1)],
            o.duration_s + o.idle_s,
        )
    samples = sorted(results[0].latencies_ns)
    bench.record(
        size,
        system,
        {
            "ping_p50_ms": percentile(samples, 50) / 1e6,
            "ping_p99_ms": percentile(samples, 99) / 1e6,
            "ping_samples": len(samples),
            "ping_errors": results[0].errors,
        },
    )
