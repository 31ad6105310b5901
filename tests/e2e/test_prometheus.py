"""A real Prometheus, run with infra/prometheus/prometheus.yml on the targets
`tamto scrape-targets` writes, scrapes a running Tamto: it loads the alert rules, and
every panel expression of the Grafana dashboards (infra/grafana) returns data.

`prometheus` comes from Debian's `prometheus` package (.ci/run installs it); without it
the test skips, saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import tamto_sdk
from tamto_common.apikeys import new_api_key
from tamto_local.ports import free_port
from tamto_sdk import EphemeralConfig
from tamto_testing.cluster import TestCluster
from tamto_testing.needs import missing
from tamto_testing.processes import TestProcess
from tamto_testing.waiting import eventually

from ..repo.infra_queries import ROOT, dashboard_queries
from .traffic import consume_all

pytestmark = pytest.mark.e2e

CONFIG = ROOT / "infra" / "prometheus"
#: What Grafana puts for the dashboards' variables when a panel is drawn: a rate window
#: of a few scrapes (the test scrapes every second), every stream.
VARIABLES = {"$__rate_interval": "1m", "$stream": ".*"}


def query(base: str, expr: str) -> list[dict[str, object]]:
    """The result of an instant query (blocking); raises on a query Prometheus refuses."""
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    result: list[dict[str, object]] = body["data"]["result"]
    return result


def alert_names(base: str) -> set[str]:
    """The alerting rules Prometheus loaded (blocking)."""
    with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=5) as response:
        groups = json.load(response)["data"]["groups"]
    return {str(rule["name"]) for group in groups for rule in group["rules"]}


def write_targets(cluster: TestCluster, path: Path) -> None:
    """The targets file, written by `tamto scrape-targets` as an operator would."""
    done = subprocess.run(
        [sys.executable, "-m", "tamto_cli", "scrape-targets", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "TAMTO_ETCD_ENDPOINTS": cluster.infra.etcd_endpoint},
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def prometheus(tamto_cluster: TestCluster, tmp_path: Path) -> Iterator[str]:
    """The base URL of a Prometheus run on infra/prometheus's config, scraping every
    second instead of every 15 s."""
    binary = shutil.which("prometheus")
    if binary is None:
        missing("prometheus not installed (Debian package prometheus; .ci/run installs it)")
    config = (CONFIG / "prometheus.yml").read_text()
    assert "scrape_interval: 15s" in config
    (tmp_path / "prometheus.yml").write_text(config.replace("interval: 15s", "interval: 1s"))
    shutil.copy(CONFIG / "alerts.yml", tmp_path / "alerts.yml")
    (tmp_path / "targets").mkdir()
    write_targets(tamto_cluster, tmp_path / "targets" / "tamto.json")
    port = free_port()
    argv = [
        binary,
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    proc = TestProcess("prometheus", argv, tmp_path / "prometheus.log").start()
    base = f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready(lambda: urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200)
        yield base
    finally:
        proc.stop()


async def traffic(cluster: TestCluster) -> None:
    """A little of everything the panels show: publishes (unary, so they are timed) on
    the direct path (the SDK's default) and through the gateway (as HTTP, MQTT and
    clients that cannot reach routers publish), a consumer that attaches, acks and
    leaves, an ephemeral publish nobody hears, and a refused credential."""
    through_gateway = tamto_sdk.ClientOptions(direct=False)
    async with tamto_sdk.connect(
        cluster.url, api_key=cluster.credential, options=through_gateway
    ) as gateway_client:
        await gateway_client.streams.ensure("observed", partitions=1)
        async with gateway_client.producer("observed") as producer:
            for i in range(10):
                await producer.send_and_wait(f"message {i}".encode())
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        async with client.producer("observed") as producer:
            for i in range(10, 20):
                await producer.send_and_wait(f"message {i}".encode())
        await client.streams.ensure("observed-ephemeral", config=EphemeralConfig())
        async with client.ephemeral_producer("observed-ephemeral") as ephemeral:
            await ephemeral.send_batch([b"nobody listens"])
    assert len(await consume_all(cluster, "observed", "watchers", 20)) == 20
    with pytest.raises(tamto_sdk.errors.Unauthenticated):
        await tamto_sdk.connect(cluster.url, api_key=str(new_api_key()))


async def test_prometheus_scrapes_tamto_and_every_dashboard_panel_has_data(
    tamto_cluster: TestCluster, prometheus: str
) -> None:
    await eventually(
        lambda: (
            {str(r["metric"]["job"]) for r in query(prometheus, "up == 1")}  # type: ignore[index]
            >= {"gateway", "router", "storage", "auth"}
        ),
        30,
        "every service scraped",
        interval_s=0.5,
    )
    await traffic(tamto_cluster)
    panels = dashboard_queries()
    assert len(panels) > 20
    exprs = {q.expr for q in panels}
    for name, value in VARIABLES.items():
        exprs = {e.replace(name, value) for e in exprs}
    pending = set(exprs)

    def all_have_data() -> bool:
        pending.difference_update({e for e in pending if query(prometheus, e)})
        return not pending

    try:
        await eventually(all_have_data, 60, "data for every panel", interval_s=1)
    except AssertionError:
        raise AssertionError(f"panels without data: {sorted(pending)}") from None
    alerts = await asyncio.to_thread(alert_names, prometheus)
    assert {
        "TamtoStorageFsyncSlow",
        "TamtoAuthDenialsSpiking",
        "TamtoProcessDown",
        "TamtoSubscriptionBacklogGrowing",
    } <= alerts


async def test_scrape_targets_keeps_rewriting_the_file_until_interrupted(
    tamto_cluster: TestCluster, tmp_path: Path
) -> None:
    """With --every, a file that went away (or a member that moved) is written again."""
    path = tmp_path / "tamto.json"
    argv = [sys.executable, "-m", "tamto_cli", "scrape-targets", str(path), "--every", "0.2"]
    env = {**os.environ, "TAMTO_ETCD_ENDPOINTS": tamto_cluster.infra.etcd_endpoint}
    proc = TestProcess("scrape-targets", argv, tmp_path / "scrape-targets.log", env).start()

    def jobs() -> set[str]:
        groups = json.loads(path.read_text()) if path.exists() else []
        return {str(g["labels"]["job"]) for g in groups}

    try:
        await eventually(lambda: len(jobs()) == 4, 30, "the members written", interval_s=0.1)
        path.unlink()
        await eventually(lambda: len(jobs()) == 4, 10, "the file written again", interval_s=0.1)
        proc.send(signal.SIGINT)
        assert await asyncio.to_thread(proc.popen.wait, 10) == 0  # type: ignore[union-attr]
    finally:
        proc.stop()
