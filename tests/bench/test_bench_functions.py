"""`tamto bench --systems functions` measures processing functions moving messages
stream to stream: a declarative filter+project, a pass-through, a Python batch function.

No performance assertion: only that each number was measured, is a number, and shows
in the tables and the targets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .tiny_run import run_local_bench

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(360)
def test_bench_reports_the_processing_function_rows(tmp_path: Path) -> None:
    bench = run_local_bench(tmp_path, "functions", timeout_s=350)
    doc = bench.doc
    found = doc["sizes"]["100"]["functions"]
    for metric in ("filter_project_msgs_s", "pass_through_msgs_s", "python_batch_msgs_s"):
        assert found[metric] > 0, metric
    assert isinstance(found["python_batch_overhead_ms"], int | float)
    assert found["messages"] == 20_000
    targets = {t["target"] for t in doc["targets"]}
    assert "function filter+project ≥ 200,000 msg/s" in targets
    assert "processing functions, stream to stream" in bench.stdout
    assert "| declarative filter+project msg/s | 100 |" in bench.markdown
