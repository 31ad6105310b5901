"""`tamto bench --systems ephemeral,core` measures ephemeral streams beside core NATS.

No performance assertion: only that each number was measured, is a number, and
shows in the tables and the targets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .tiny_run import run_local_bench

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(360)
def test_bench_reports_ephemeral_rows_beside_core_nats(tmp_path: Path) -> None:
    bench = run_local_bench(tmp_path, "ephemeral,core", timeout_s=350)
    size = bench.doc["sizes"]["100"]
    for system in ("ephemeral", "core_nats"):
        for metric in (
            "pubsub_msgs_s",
            "fanout_100_deliveries_s",
            "rr_per_s",
            "rr_p99_ms",
            "rr_pipelined_per_s",
            "rr_serial_p50_ms",
            "rr_crowd_p99_ms",
            "ping_p50_ms",
            "ping_p99_ms",
        ):
            assert isinstance(size[system][metric], int | float), (system, metric)
        assert size[system]["latency_500"]["samples"] > 0, system
    assert size["ephemeral"]["pubsub_msgs_s"] > 0
    assert size["ephemeral"]["fanout_100_deliveries_s"] > 0
    assert size["ephemeral"]["rr_per_s"] > 0
    assert size["ephemeral"]["ping_samples"] > 0
    targets = {t["target"] for t in bench.doc["targets"]}
    assert targets >= {
        "ephemeral pub→deliver ≥ 2x core NATS",
        "request/reply ≥ 0.5x core NATS (1 requester pipelining)",
        "request/reply p50 ≤ 2 ms one at a time",
        "request/reply p99 ≤ 10 ms, 200 concurrent",
    }
    assert "ephemeral streams" in bench.stdout
    assert "| ephemeral | size B | Tamto ephemeral | core NATS | ratio |" in bench.markdown
