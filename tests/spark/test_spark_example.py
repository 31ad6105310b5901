"""examples/spark_source.py runs to its `ok` against a real system.

It runs in this process, so it reuses the test run's one SparkSession (a
program of its own would start a JVM of its own, ~1 minute here); its storage
directory is this module's fast-sealing cluster's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from pyspark.sql import SparkSession

from tamto_testing.cluster import TestCluster

from .conftest import data_dir

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_source.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_source_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_spark_source_example_counts_what_it_published(
    spark: SparkSession,
    sealing_cluster: TestCluster,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TAMTO_URL", sealing_cluster.url)
    monkeypatch.setenv("TAMTO_API_KEY", sealing_cluster.credential)
    monkeypatch.setenv("TAMTO_STORAGE_DIR", str(data_dir(sealing_cluster)))
    await load_example().main()
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "ok", out
    assert "{'alice': 3, 'bob': 2, 'carol': 1}" in out[0], out
