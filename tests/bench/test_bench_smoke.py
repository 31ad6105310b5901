"""`tamto bench --local --quick` runs end to end and reports every metric for both systems.

No performance assertion: only that each number was measured and is a number.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .tiny_run import run_local_bench

pytestmark = pytest.mark.e2e

THROUGHPUT = ("publish_msgs_s", "publish_mb_s", "consume_msgs_s", "consume_mb_s")
LATENCY = ("p50_ms", "p99_ms", "p999_ms", "samples", "saturated")
EVERYDAY = ("seq_publish_msgs_s", "seq_p50_ms", "seq_p99_ms", "seq_samples", "iter_consume_msgs_s")


@pytest.mark.timeout(360)
def test_bench_quick_reports_every_metric_for_tamto_and_jetstream(tmp_path: Path) -> None:
    # ephemeral streams have their own smoke test (test_bench_ephemeral.py)
    bench = run_local_bench(tmp_path, "tamto,jetstream,core,ceiling", timeout_s=350)
    doc = bench.doc
    size = doc["sizes"]["100"]
    for system in ("tamto", "jetstream"):
        for metric in THROUGHPUT:
            assert isinstance(size[system][metric], int | float), (system, metric)
        for field in LATENCY:
            assert field in size[system]["latency_500"], (system, field)
        assert size[system]["published"] > 0
        assert size[system]["consumed"] >= size[system]["published"]
        # the everyday calls: sequential durable publish, per-message consuming
        for metric in EVERYDAY:
            assert size[system][metric] > 0, (system, metric)
        assert size[system]["seq_errors"] == 0, system
    # Tamto's latency phase splits off its publish side (the breakdown rows)
    tamto_latency = size["tamto"]["latency_500"]
    assert tamto_latency["publish_ack_p50_ms"] > 0
    # The SDK's default path: straight to the owning router (docs/sdk.md), no gateway hop.
    assert set(tamto_latency["hops_ms"]) >= {"router_publish", "storage_append"}
    assert tamto_latency["messages_per_storage_append"] > 0
    assert "publish_ack_p50_ms" not in size["jetstream"]["latency_500"]
    # and its deliver side, from the router's sequencing on: a part of each message's time
    assert 0 < tamto_latency["deliver_side_p50_ms"] <= tamto_latency["p50_ms"]
    assert "deliver_side_p50_ms" not in size["jetstream"]["latency_500"]
    assert isinstance(size["ceiling"]["msgs_s"], int | float)
    assert isinstance(size["tamto"]["publish_batch_msgs_s"], int | float)
    assert isinstance(doc["settle_s"], int | float)
    assert set(doc["memory_peak_rss_bytes"]["tamto"]) >= {"gateway", "router", "storage", "auth"}
    assert doc["memory_peak_rss_bytes"]["jetstream"]["nats-server"] > 0
    assert "sync_interval: always" in doc["jetstream_config"]
    assert {t["target"] for t in doc["targets"]} >= {
        "publish ≥ 10x JetStream",
        "consume+ack ≥ 10x JetStream",
        "≥ 70% of bare ceiling",
        "send_and_wait p50 ≤ 1 ms",
        "send_and_wait p99 ≤ 3 ms",
        "per-message consume ≥ 250,000 msg/s",
        "per-message consume ≥ 5x JetStream",
    }
    assert "tamto bench" in bench.stdout
    assert "| metric |" in bench.markdown
    assert "| send_and_wait p50 ms | 100 |" in bench.markdown
    assert "| per-message consume+ack msg/s | 100 |" in bench.markdown
    assert "publish→ack p50 ms @ 500/s" in bench.markdown
