"""`tamto bench --local --quick`, one tiny run of every one-node system, reports every
metric: Tamto beside JetStream and the bare ceiling, ephemeral streams beside core
NATS, publishing over HTTP beside `send_batch`, and processing functions stream to
stream.

One run serves the four tests (a module fixture): each system's phase is the same as
in a run of it alone, and the local system and its peers start once, not four times.
No performance assertion: only that each number was measured, is a number, and shows
in the tables and the targets.
"""

from __future__ import annotations

import pytest

from .tiny_run import LocalBench, run_local_bench

pytestmark = pytest.mark.e2e

SYSTEMS = "tamto,jetstream,core,ceiling,ephemeral,http,functions"
THROUGHPUT = ("publish_msgs_s", "publish_mb_s", "consume_msgs_s", "consume_mb_s")
LATENCY = ("p50_ms", "p99_ms", "p999_ms", "samples", "saturated")
EVERYDAY = ("seq_publish_msgs_s", "seq_p50_ms", "seq_p99_ms", "seq_samples", "iter_consume_msgs_s")
EPHEMERAL = (
    "pubsub_msgs_s",
    "fanout_100_deliveries_s",
    "rr_per_s",
    "rr_p99_ms",
    "rr_pipelined_per_s",
    "rr_serial_p50_ms",
    "rr_crowd_p99_ms",
    "ping_p50_ms",
    "ping_p99_ms",
)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> LocalBench:
    return run_local_bench(tmp_path_factory.mktemp("bench"), SYSTEMS, timeout_s=550)


def targets(bench: LocalBench) -> set[str]:
    return {t["target"] for t in bench.doc["targets"]}


@pytest.mark.timeout(600)
def test_every_metric_for_tamto_and_jetstream(bench: LocalBench) -> None:
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
    # TINY_RUN's --seal-age-ms reaches the Tamto the run started, not only freshness's
    assert doc["options"]["seal_age_ms"] == 300
    assert "tamto: storage's seal age 300 ms (--seal-age-ms)" in doc["notes"]
    assert set(doc["memory_peak_rss_bytes"]["tamto"]) >= {"gateway", "router", "storage", "auth"}
    assert doc["memory_peak_rss_bytes"]["jetstream"]["nats-server"] > 0
    assert "sync_interval: always" in doc["jetstream_config"]
    assert targets(bench) >= {
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


@pytest.mark.timeout(600)
def test_ephemeral_rows_beside_core_nats(bench: LocalBench) -> None:
    size = bench.doc["sizes"]["100"]
    for system in ("ephemeral", "core_nats"):
        for metric in EPHEMERAL:
            assert isinstance(size[system][metric], int | float), (system, metric)
        assert size[system]["latency_500"]["samples"] > 0, system
    assert size["ephemeral"]["pubsub_msgs_s"] > 0
    assert size["ephemeral"]["fanout_100_deliveries_s"] > 0
    assert size["ephemeral"]["rr_per_s"] > 0
    assert size["ephemeral"]["ping_samples"] > 0
    assert targets(bench) >= {
        "ephemeral pub→deliver ≥ 2x core NATS",
        "request/reply ≥ 0.5x core NATS (1 requester pipelining)",
        "request/reply p50 ≤ 2 ms one at a time",
        "request/reply p99 ≤ 10 ms, 200 concurrent",
    }
    assert "ephemeral streams" in bench.stdout
    assert "| ephemeral | size B | Tamto ephemeral | core NATS | ratio |" in bench.markdown


@pytest.mark.timeout(600)
def test_http_publishing_beside_send_batch(bench: LocalBench) -> None:
    tamto = bench.doc["sizes"]["100"]["tamto"]
    for metric in ("publish_batch_msgs_s", "http_ndjson_msgs_s", "http_arrow_msgs_s"):
        assert tamto[metric] > 0, metric
    assert "| publish msg/s (HTTP, NDJSON) | 100 |" in bench.markdown
    assert "| publish msg/s (HTTP, Arrow) | 100 |" in bench.markdown


@pytest.mark.timeout(600)
def test_the_processing_function_rows(bench: LocalBench) -> None:
    found = bench.doc["sizes"]["100"]["functions"]
    for metric in ("filter_project_msgs_s", "pass_through_msgs_s", "python_batch_msgs_s"):
        assert found[metric] > 0, metric
    assert isinstance(found["python_batch_overhead_ms"], int | float)
    assert found["messages"] == 20_000
    assert "function filter+project ≥ 200,000 msg/s" in targets(bench)
    assert "processing functions, stream to stream" in bench.stdout
    assert "| declarative filter+project msg/s | 100 |" in bench.markdown
