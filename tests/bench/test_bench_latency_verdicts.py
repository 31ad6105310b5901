"""The latency target on one node: publish→deliver p50 at 1,000 msg/s against 3 ms, and
p99 at 5,000 msg/s against 10 ms (20 ms at 10 KiB). Pure functions of the JSON document;
no system is started."""

from __future__ import annotations

from typing import Any

from tamto_bench.report import finish


def _phase(p50_ms: float, p99_ms: float) -> dict[str, Any]:
    return {"p50_ms": p50_ms, "p99_ms": p99_ms, "p999_ms": p99_ms, "saturated": False}


def test_one_node_latency_verdicts_have_the_issues_bars_per_size() -> None:
    doc = finish(
        {
            "sizes": {
                "100": {"tamto": {"latency_1000": _phase(2.5, 6.0), "latency_5000": _phase(4, 12)}},
                "10240": {"tamto": {"latency_1000": _phase(3.5, 9), "latency_5000": _phase(8, 15)}},
            },
            "memory_peak_rss_bytes": {},
        }
    )
    got = {(t["target"], t["size"]): (t["bar"], t["met"]) for t in doc["targets"]}
    assert got[("p50 ≤ 3 ms @ 1,000/s", 100)] == (3.0, True)
    assert got[("p50 ≤ 3 ms @ 1,000/s", 10240)] == (3.0, False)
    assert got[("p99 ≤ 10 ms @ 5,000/s", 100)] == (10.0, False)
    assert got[("p99 ≤ 20 ms @ 5,000/s", 10240)] == (20.0, True)
    assert ("p99 ≤ 10 ms @ 5,000/s", 10240) not in got


def test_the_withdrawn_10x_jetstream_targets_are_not_verdicts_at_10_kib() -> None:
    def size(publish: float, consume: float) -> dict[str, Any]:
        return {
            "tamto": {"publish_msgs_s": publish, "consume_msgs_s": consume},
            "jetstream": {"publish_msgs_s": 1000, "consume_msgs_s": 1000},
        }

    doc = finish(
        {
            "sizes": {"1024": size(20_000, 5_000), "10240": size(6_000, 3_000)},
            "memory_peak_rss_bytes": {},
        }
    )
    got = {(t["target"], t["size"]): (t["bar"], t["met"]) for t in doc["targets"]}
    assert got[("publish ≥ 10x JetStream", 1024)] == (10.0, True)
    assert got[("consume+ack ≥ 10x JetStream", 1024)] == (10.0, False)
    assert ("publish ≥ 10x JetStream", 10240) not in got
    assert ("consume+ack ≥ 10x JetStream", 10240) not in got
