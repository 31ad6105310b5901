"""`tamto bench --systems freshness` measures how long after its ack a message is visible
in the segment store (a directory, and S3 on SeaweedFS) and in its Iceberg table, at
rest and under load, each store on a local Tamto the phase starts.

No performance assertion: only that every reader's numbers were measured for both
windows, that probes were seen, and that the table and the targets show them.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from .tiny_run import run_local_bench

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(900)
def test_bench_reports_freshness_per_reader_at_rest_and_under_load(tmp_path: Path) -> None:
    bench = run_local_bench(
        tmp_path,
        "freshness",
        timeout_s=880,
        # storage's 5 s default seal age is most of each window's wait for the probes to
        # be visible; a shorter one measures the same path sooner
        overrides=("--seal-age-ms", "1000"),
    )
    doc = bench.doc
    found = doc["sizes"]["100"]["freshness"]
    assert set(found) == {"dir", "s3"}
    for store, windows in found.items():
        assert windows["seal_age_ms"] == 1000, store
        assert windows["load"]["load_msgs_s"] > 0, store
        for state in ("rest", "load"):
            for reader in ("store", "iceberg"):
                seen = windows[state][reader]
                assert seen["probes"] > 0, (store, state, reader)
                assert seen["unseen"] < seen["probes"], (store, state, reader)
                assert not math.isnan(seen["p99_s"]), (store, state, reader)
                assert seen["p50_s"] <= seen["p99_s"] <= seen["max_s"], (store, state, reader)
    targets = {t["target"] for t in doc["targets"]}
    assert "freshness p99 ≤ 10 s (s3 iceberg)" in targets
    assert "freshness: ack to visible in the segment store" in bench.stdout
    assert "| Iceberg snapshot (S3 store), under load | 100 |" in bench.markdown
