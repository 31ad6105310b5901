"""`tamto bench` without `--local`: it benchmarks an already running Tamto.

The system is the test cluster (every service a real process, etcd and NATS
from the session's infrastructure); the command gets its gateway URL, API key
and etcd endpoint through `--url`, `--api-key` and `--etcd`, measures Tamto
only (`--systems tamto`) with the smallest settings, and must find every
service's pid through etcd to report its peak memory.
No performance assertion: only that each number was measured and is a number.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tamto_local.layout import SERVICES
from tamto_testing.cluster import TestCluster

from .tiny_run import run_bench

pytestmark = pytest.mark.e2e

THROUGHPUT = ("publish_msgs_s", "publish_mb_s", "consume_msgs_s", "consume_mb_s")
LATENCY = ("p50_ms", "p99_ms", "p999_ms", "max_ms")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@pytest.mark.timeout(360)
def test_bench_measures_a_running_system_named_by_url_key_and_etcd(
    tamto_cluster: TestCluster, tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    # Nothing but the options may point the command at a system.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TAMTO_URL", "TAMTO_API_KEY", "TAMTO_ETCD_ENDPOINTS")
    }
    proc = run_bench(
        "--systems",
        "tamto",
        "--url",
        tamto_cluster.url,
        "--api-key",
        tamto_cluster.credential,
        "--etcd",
        tamto_cluster.infra.etcd_endpoint,
        "--data-dir",
        str(tmp_path / "no-data"),
        "--json",
        str(out),
        cwd=tmp_path,
        timeout_s=270,
        env=env,
    )
    # The cluster was not stopped or replaced by the run.
    assert all(p.alive() for p in tamto_cluster.processes.values())
    doc = json.loads(out.read_text())

    assert doc["options"]["local"] is False
    assert doc["options"]["systems"] == ["tamto"]
    assert set(doc["sizes"]) == {"100"}
    assert set(doc["sizes"]["100"]) == {"tamto"}
    tamto = doc["sizes"]["100"]["tamto"]
    for metric in THROUGHPUT:
        assert _number(tamto[metric]), (metric, tamto[metric])
    assert tamto["published"] > 0
    assert tamto["publish_errors"] == 0
    assert tamto["consumed"] >= tamto["published"]
    latency = tamto["latency_500"]
    assert latency["samples"] > 0, latency
    for field in LATENCY:
        assert _number(latency[field]), (field, latency)

    # Every service's pid came from its etcd registration. A service is named
    # alone when it has one member in etcd, else `<service>/<instance id>`
    # (other clusters of the session share this etcd); this cluster's instance
    # ids are `tamto_cluster.instance_id(service)`.
    assert not [n for n in doc["notes"] if "memory not sampled" in n], doc["notes"]
    peaks = doc["memory_peak_rss_bytes"].get("tamto", {})
    for service in SERVICES:
        name = service if service in peaks else f"{service}/{tamto_cluster.instance_id(service)}"
        assert peaks.get(name, 0) > 0, (service, peaks)
    assert "jetstream" not in doc["memory_peak_rss_bytes"]
    assert "tamto bench" in proc.stdout
