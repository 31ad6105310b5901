"""The durable workloads, run alike on Tamto, JetStream and their clusters: publish
throughput, consume+ack, the everyday calls (one publish at a time, per-message
consuming) and publish→deliver latency at fixed rates."""

from __future__ import annotations

from tamto_bench.ceiling import BATCH_MESSAGES
from tamto_bench.harness import rpc_totals
from tamto_bench.runner.context import Bench
from tamto_bench.runner.options import MB
from tamto_bench.runner.stats import (
    ROUTER_APPEND,
    ROUTER_PUBLISH,
    drain_rate,
    hop_totals,
    latency_summary,
    percentile,
    publish_side,
)


async def _router_writes(routers: list[str]) -> tuple[float, int]:
    """Seconds in, and number of, the routers' writes so far: Append (from a gateway)
    and Publish (the direct path)."""
    appends = await rpc_totals(routers, ROUTER_APPEND)
    publishes = await rpc_totals(routers, ROUTER_PUBLISH)
    return appends[0] + publishes[0], appends[1] + publishes[1]


#: Publishes all JetStream producers may have unacknowledged together (see `publish`).
_JETSTREAM_MAX_QUEUED = 8_000


async def publish(bench: Bench, system: str, size: int) -> None:
    """`producers` publishing as fast as their windows allow; the stream stays for
    the consume phases."""
    o = bench.options
    stream = bench.stream("tp", size)
    await bench.admin.create(system, stream)
    window = o.window
    if system in ("jetstream", "jetstream-r3"):
        # nats-server answers 429 "too many requests" once a stream has about
        # 10,000 publishes queued, and nats-py then never resolves that publish's
        # future. Keep the producers' windows together below that; it is still
        # seconds of JetStream's durable throughput, so it costs it nothing.
        window = min(window, _JETSTREAM_MAX_QUEUED // o.producers)
    specs = [bench.spec(system, "pub", stream, size, window=window) for _ in range(o.producers)]
    results = await bench.run(f"{system} publish", specs, o.duration_s)
    # Everything acknowledged, over the window plus the time the in-flight tail
    # took to drain: a deep window that only fills during the run is not counted
    # as if it were throughput, nor is it lost.
    total, rate = drain_rate(results)
    bench.record(
        size,
        system,
        {
            "publish_msgs_s": rate,
            "publish_mb_s": rate * size / MB,
            "published": total,
            "publish_acked_in_window_msgs_s": sum(r.in_window for r in results) / o.duration_s,
            "publish_errors": sum(r.errors for r in results),
        },
    )


async def drain(bench: Bench, system: str, size: int) -> None:
    """`consumers` consuming and acknowledging the publish phase's backlog."""
    o = bench.options
    stream = bench.stream("tp", size)
    specs = [
        bench.spec(system, "sub", stream, size, duration_s=o.drain_limit_s)
        for _ in range(o.consumers)
    ]
    try:
        results = await bench.run(f"{system} consume", specs, o.drain_limit_s)
    finally:
        await bench.admin.delete(system, stream)
    total, rate = drain_rate(results)
    bench.record(
        size,
        system,
        {"consume_msgs_s": rate, "consume_mb_s": rate * size / MB, "consumed": total},
    )


async def publish_batches(bench: Bench, size: int) -> None:
    """Publish with `send_batch` of `BATCH_MESSAGES` messages per call: the client
    hands over batches, as the ceiling's client does, so the two compare the
    broker path alone (the per-message `send` path is what JetStream is compared to)."""
    o = bench.options
    stream = bench.stream("tpb", size)
    specs = [
        bench.spec("tamto", "pub", stream, size, batch_api=BATCH_MESSAGES)
        for _ in range(o.producers)
    ]
    async with bench.stream_on("tamto", stream):
        results = await bench.run("tamto publish (send_batch)", specs, o.duration_s)
    _total, rate = drain_rate(results)
    bench.record(
        size, "tamto", {"publish_batch_msgs_s": rate, "publish_batch_mb_s": rate * size / MB}
    )


async def sequential(bench: Bench, system: str, size: int) -> None:
    """One producer, each durable publish awaited before the next (Tamto:
    `send_and_wait`; JetStream: `js.publish`): the latency of the call a web
    handler makes, and the rate it allows."""
    o = bench.options
    stream = bench.stream("seq", size)
    routers = bench.systems.router_metrics.get(system, [])
    async with bench.stream_on(system, stream):
        before = await _router_writes(routers)
        results = await bench.run(
            f"{system} sequential publish",
            [bench.spec(system, "seq", stream, size, window=1)],
            o.duration_s,
        )
        after = await _router_writes(routers)
    samples = sorted(results[0].latencies_ns)
    values = {
        "seq_publish_msgs_s": results[0].in_window / o.duration_s,
        "seq_p50_ms": percentile(samples, 50) / 1e6,
        "seq_p99_ms": percentile(samples, 99) / 1e6,
        "seq_samples": len(samples),
        "seq_errors": results[0].errors,
    }
    calls = after[1] - before[1]
    if calls > 0:
        # The routers' mean server time per write during the phase (Append from a
        # gateway, Publish on the direct path): with R > 1 the replicated append (Q of R
        # replicas fsynced), with R = 1 one storage append.
        values["seq_router_append_ms"] = (after[0] - before[0]) / calls * 1e3
    bench.record(size, system, values)


async def per_message(bench: Bench, system: str, size: int) -> None:
    """One consumer process reading the publish phase's backlog message by message
    (Tamto: `async for` + `ack` each; JetStream: `fetch(100)` + `ack()` each) through
    a subscription of its own, for one window at most."""
    o = bench.options
    stream = bench.stream("tp", size)
    results = await bench.run(
        f"{system} per-message consume",
        [bench.spec(system, "iter", stream, size, group="bench-iter")],
        o.duration_s + o.idle_s,
    )
    total, rate = drain_rate(results)
    bench.record(size, system, {"iter_consume_msgs_s": rate, "iter_consumed": total})


async def latency(bench: Bench, system: str, size: int, rate: float) -> None:
    """Publish→deliver latency at a fixed `rate`, with where the publish side's time
    goes (`publish_side`); marked saturated when the system fell behind the rate."""
    o = bench.options
    # A name per system: durable and ephemeral latency run on the same Tamto, and a deleted
    # stream's name stays taken for storage's --stream-delete-grace-ms.
    stream = bench.stream(f"lat-{system}", size, rate)
    subs = [
        bench.spec(system, "sub", stream, size, latency=True, group="bench")
        for _ in range(o.consumers)
    ]
    pages = bench.systems.service_metrics.get(system, {})
    async with bench.stream_on(system, stream, push=True):
        pubs = [
            bench.spec(system, "pub", stream, size, rate=rate / o.producers)
            for _ in range(o.producers)
        ]
        before = await hop_totals(pages)
        results = await bench.run(f"{system} latency", subs + pubs, o.duration_s + o.idle_s)
        after = await hop_totals(pages)
    summary = latency_summary(results[: len(subs)], rate)
    sent = sum(r.total for r in results[len(subs) :])
    summary["delivered"] = sum(r.total for r in results[: len(subs)])
    summary["sent"] = sent
    summary.update(publish_side(results[len(subs) :], before, after))
    # Fewer deliveries than sends by the end: the system could not keep up with
    # the rate, so the percentiles measure a growing queue, not latency.
    summary["saturated"] = summary["delivered"] < 0.95 * sent
    bench.record(size, system, {f"latency_{rate:g}": summary})
