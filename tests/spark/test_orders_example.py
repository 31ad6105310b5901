"""examples/orders runs to its `ok` against a real system with a processing node.

In this process, so it reuses the test run's one SparkSession; windows of 5 s instead
of a minute, so the last one closes within seconds. The example checks its own output
(every stream's count, the revenue windows against Spark's recount, each customer's
orders in order); this test checks it says so, and that the chart was drawn.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tamto_testing.cluster import TestCluster
from tests.processing_nodes import processing_node

from .conftest import data_dir

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders"


@pytest.fixture
def processing(sealing_cluster: TestCluster) -> Iterator[TestCluster]:
    with processing_node(sealing_cluster) as cluster:
        yield cluster


async def test_the_order_pipeline_example_checks_its_output(
    spark: SparkSession,
    processing: TestCluster,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("TAMTO_URL", processing.url)
    monkeypatch.setenv("TAMTO_API_KEY", processing.credential)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    spec = importlib.util.spec_from_file_location("orders_example", EXAMPLE / "run.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look it up
    spec.loader.exec_module(module)
    args = ["--orders", "600", "--window-s", "5", "--lateness-s", "3"]
    args += ["--storage-dir", str(data_dir(processing)), "--out", str(tmp_path)]
    await module.main(args)
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "ok", out
    assert "Revenue per region per 5 s window" in out
    assert (tmp_path / "revenue.png").stat().st_size > 0
