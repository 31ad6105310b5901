"""`tamto bench --systems http`: publishing through the gateway's HTTP API, NDJSON and
Arrow batches, measured beside the SDK's send_batch in one run."""

from __future__ import annotations

from pathlib import Path

import pytest

from .tiny_run import run_local_bench

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(300)
def test_bench_reports_http_publishing_beside_send_batch(tmp_path: Path) -> None:
    bench = run_local_bench(tmp_path, "http", timeout_s=290)
    tamto = bench.doc["sizes"]["100"]["tamto"]
    for metric in ("publish_batch_msgs_s", "http_ndjson_msgs_s", "http_arrow_msgs_s"):
        assert tamto[metric] > 0, metric
    assert "| publish msg/s (HTTP, NDJSON) | 100 |" in bench.markdown
    assert "| publish msg/s (HTTP, Arrow) | 100 |" in bench.markdown
