"""Every program in examples/ runs to its `ok` against a real system."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tamto_testing.cluster import TestCluster

from ..programs import run_to_end

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: Run by tests/spark/test_spark_example.py, with the test run's one SparkSession.
SPARK_PROGRAMS = ["spark_source.py"]
PROGRAMS = sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in SPARK_PROGRAMS)


def test_every_example_is_listed_here() -> None:
    assert PROGRAMS + SPARK_PROGRAMS == [
        "arrow_batches.py",
        "dead_letters.py",
        "dedup_ids.py",
        "replay.py",
        "subscription_types.py",
        "spark_source.py",
    ]


@pytest.mark.parametrize("program", PROGRAMS)
def test_example_runs(tamto_cluster: TestCluster, program: str) -> None:
    done = run_to_end(
        [sys.executable, str(EXAMPLES / program)],
        env={"TAMTO_URL": tamto_cluster.url, "TAMTO_API_KEY": tamto_cluster.credential},
        timeout=120,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.splitlines()[-1] == "ok"
