"""`tamto bench --local --nodes 3` measures the cluster: Tamto with R=3 on three nodes and
JetStream R3 on three clustered nats-servers, beside Tamto on one node (R=1).

No performance assertion: only that each number was measured and every cluster
target got a verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .tiny_run import run_local_bench

pytestmark = pytest.mark.e2e

#: Measured for R=1, R=3 and JetStream R3 alike.
DURABLE = ("publish_msgs_s", "publish_mb_s", "consume_msgs_s", "seq_publish_msgs_s", "seq_p50_ms")


@pytest.mark.timeout(480)
def test_bench_cluster_reports_r3_beside_r1_and_jetstream_r3(tmp_path: Path) -> None:
    bench = run_local_bench(
        tmp_path,
        "tamto",
        timeout_s=470,
        options=("--nodes", "3"),
        # the R=3 ÷ R=1 target is at 1 KiB; one size keeps the run short
        overrides=("--sizes", "1024"),
    )
    doc = bench.doc
    size = doc["sizes"]["1024"]
    for system in ("tamto", "tamto_r3", "jetstream_r3"):
        for metric in DURABLE:
            assert size[system][metric] > 0, (system, metric)
        assert size[system]["seq_errors"] == 0, system
        assert size[system]["publish_errors"] == 0, system
        assert size[system]["consumed"] >= size[system]["published"], system
        assert size[system]["latency_500"]["samples"] > 0, system
    # (the tiny run's one latency rate, 500/s, has no target; the full run's have)
    # the replication round trip comes from the routers' Append timings of both runs
    assert size["tamto"]["seq_router_append_ms"] > 0
    assert size["tamto_r3"]["seq_router_append_ms"] > 0
    assert doc["replication_round_trip_ms"]["1024"] >= 0
    assert doc["cluster"]["tamto_r3"] == {
        "nodes": 3,
        "gateways": 2,
        "replication_factor": 3,
        "ack_quorum": 2,
    }
    assert "routes" in doc["cluster"]["jetstream_r3_config"]
    assert "sync_interval: always" in doc["cluster"]["jetstream_r3_config"]
    assert set(doc["memory_peak_rss_bytes"]["tamto-r3"]) >= {"storage/storage-3", "router/router-3"}
    assert len(doc["memory_peak_rss_bytes"]["jetstream-r3"]) == 3
    targets = {t["target"] for t in doc["targets"]}
    assert targets >= {
        "R=3 publish ≥ 0.5x R=1",
        "R=3 publish ≥ 10x JetStream R3",
        "R=3 send_and_wait p50 ≤ 1 ms + rt",
        "R=3 send_and_wait p99 ≤ 3 ms + rt",
    }
    assert "| cluster | size B | Tamto R=1 | Tamto R=3 |" in bench.markdown
    assert "| replication round trip ms | 1024 |" in bench.markdown
