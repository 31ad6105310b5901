"""The cluster's verdicts: R=3 against R=1 and JetStream R3, and the latency bars
relaxed by the replication round trip measured in the same run (pure functions of the
JSON document; no system is started)."""

from __future__ import annotations

import math
from typing import Any

from tamto_bench.report import cluster_rows, finish, replication_round_trip_ms


def _doc() -> dict[str, Any]:
    one_node = {"publish_msgs_s": 100_000.0, "seq_router_append_ms": 1.5}
    r3 = {
        "publish_msgs_s": 60_000.0,
        "seq_p50_ms": 2.0,
        "seq_p99_ms": 4.5,
        "seq_router_append_ms": 2.5,
        "latency_1000": {"p50_ms": 3.5, "p99_ms": 9.0, "p999_ms": 12.0, "saturated": False},
        "latency_5000": {"p50_ms": 6.0, "p99_ms": 12.0, "p999_ms": 15.0, "saturated": False},
    }
    return {
        "sizes": {
            "1024": {
                "tamto": one_node,
                "tamto_r3": r3,
                "jetstream_r3": {"publish_msgs_s": 4_000.0},
            },
            # no sequential phase at this size: the round trip of another size applies
            "10240": {"tamto": {}, "tamto_r3": {"latency_5000": {"p99_ms": 20.5}}},
        },
        "memory_peak_rss_bytes": {},
    }


def test_round_trip_is_the_routers_append_time_beyond_one_node() -> None:
    doc = _doc()
    assert replication_round_trip_ms(doc, "1024") == 1.0
    assert replication_round_trip_ms(doc, "10240") == 1.0
    doc["sizes"]["1024"]["tamto_r3"]["seq_router_append_ms"] = 1.0  # R=3 faster: no relaxing
    assert replication_round_trip_ms(doc, "1024") == 0.0
    del doc["sizes"]["1024"]["tamto"]["seq_router_append_ms"]
    assert math.isnan(replication_round_trip_ms(doc, "1024"))


def test_cluster_verdicts_relax_latency_bars_by_the_round_trip() -> None:
    doc = finish(_doc())
    got = {(t["target"], t["size"]): (t["bar"], t["met"]) for t in doc["targets"]}
    assert got[("R=3 publish ≥ 0.5x R=1", 1024)] == (0.5, True)  # 0.6x
    assert got[("R=3 publish ≥ 10x JetStream R3", 1024)] == (10.0, True)  # 15x
    assert got[("R=3 send_and_wait p50 ≤ 1 ms + rt", 1024)] == (2.0, True)
    assert got[("R=3 send_and_wait p99 ≤ 3 ms + rt", 1024)] == (4.0, False)
    assert got[("R=3 p50 ≤ 3 ms + rt @ 1,000/s", 1024)] == (4.0, True)
    assert got[("R=3 p99 ≤ 10 ms + rt @ 5,000/s", 1024)] == (11.0, False)
    assert got[("R=3 p99 ≤ 20 ms + rt @ 5,000/s", 10240)] == (21.0, True)
    assert doc["replication_round_trip_ms"] == {"1024": 1.0, "10240": 1.0}
    rows = {(r[0], r[1]): r for r in cluster_rows(doc)}
    assert rows[("publish msg/s", "1024")][2:] == [
        "100,000",
        "60,000",
        "0.60x",
        "4,000",
        "15.00x",
    ]
    assert rows[("replication round trip ms", "1024")][3] == "1.00"
