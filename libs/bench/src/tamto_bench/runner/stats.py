"""The arithmetic of the measurements: percentiles, latency summaries, drain rates and
where a publish's time goes (each hop's server time, read from the services' RPC
histograms)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tamto_bench.harness import rpc_totals
from tamto_bench.spec import JobResult

#: The router's append call, timed by its RPC histogram (the replication round trip).
ROUTER_APPEND = "/tamto.v1.Router/Append"
ROUTER_PUBLISH = "/tamto.v1.Router/Publish"
#: The calls on a durable publish's way to disk, each timed by its service's RPC
#: histogram; the latency phase reports their mean server times (`hops_ms`). A direct
#: publish (the SDK's default path) is the router's Publish, and no gateway call.
LATENCY_HOPS = (
    ("gateway", "gateway_publish", "/tamto.v1.Gateway/Publish"),
    ("router", "router_append", ROUTER_APPEND),
    ("router", "router_publish", ROUTER_PUBLISH),
    ("storage", "storage_append", "/tamto.v1.Storage/Append"),
)

HopTotals = dict[str, tuple[float, int]]


def percentile(sorted_values: Sequence[int], q: float) -> float:
    """The nearest-rank percentile `q` (0-100) of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[rank - 1])


def latency_summary(results: list[JobResult], rate: float) -> dict[str, Any]:
    """p50/p99/p99.9 (ms) of every consumer's samples, and how many there were; with
    deliver-side samples (Tamto) their p50/p99: from the router sequencing a message
    to its consumer receiving it, the part of the latency after the publish side."""
    samples = sorted(ns for r in results for ns in r.latencies_ns)
    summary: dict[str, Any] = {
        "rate_msgs_s": rate,
        "samples": len(samples),
        "p50_ms": percentile(samples, 50) / 1e6,
        "p99_ms": percentile(samples, 99) / 1e6,
        "p999_ms": percentile(samples, 99.9) / 1e6,
        "max_ms": (samples[-1] / 1e6) if samples else math.nan,
    }
    deliver_side = sorted(ns for r in results for ns in r.deliver_side_ns)
    if deliver_side:
        summary["deliver_side_p50_ms"] = percentile(deliver_side, 50) / 1e6
        summary["deliver_side_p99_ms"] = percentile(deliver_side, 99) / 1e6
    return summary


async def hop_totals(pages: dict[str, list[str]]) -> HopTotals:
    """Seconds in, and number of, each `LATENCY_HOPS` call so far (none without pages)."""
    if not pages:
        return {}
    return {
        name: await rpc_totals(pages.get(service, []), method)
        for service, name, method in LATENCY_HOPS
    }


def publish_side(
    publishers: list[JobResult], before: HopTotals, after: HopTotals
) -> dict[str, Any]:
    """Where a latency phase's publish→deliver time goes on the publish side: the
    publishers' publish→durable-ack p50/p99 (Tamto's workers time them), each hop's mean
    server time over the phase (`LATENCY_HOPS`, the calls made) and the messages per
    storage Append call (batching: a message waits for the batch in flight before it)."""
    out: dict[str, Any] = {}
    samples = sorted(ns for r in publishers for ns in r.latencies_ns)
    if samples:
        out["publish_ack_p50_ms"] = percentile(samples, 50) / 1e6
        out["publish_ack_p99_ms"] = percentile(samples, 99) / 1e6
    hops: dict[str, float] = {}
    for name, (seconds, calls) in after.items():
        made = calls - before.get(name, (0.0, 0))[1]
        if made > 0:
            hops[name] = (seconds - before.get(name, (0.0, 0))[0]) / made * 1e3
    if hops:
        out["hops_ms"] = hops
    appends = after.get("storage_append", (0.0, 0))[1] - before.get("storage_append", (0.0, 0))[1]
    if appends > 0:
        out["messages_per_storage_append"] = sum(r.total for r in publishers) / appends
    return out


def drain_rate(results: list[JobResult]) -> tuple[int, float]:
    """Messages consumed by all consumers, and the rate from the common start to the last."""
    total = sum(r.total for r in results)
    if not total:
        return 0, 0.0
    started = min(r.started for r in results)
    last = max(r.last for r in results if r.total)
    return total, total / max(last - started, 1e-6)
