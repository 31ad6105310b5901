"""`tamto up` as a user runs it: the whole system, supervised, on one data directory."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pyarrow.dataset as ds
import pytest

from tamto_common.cluster_credential import CREDENTIAL_KEY
from tamto_common.config import parse_endpoints
from tamto_common.membership import connect_etcd, list_members
from tamto_local.ports import free_port
from tamto_local.s3 import S3Spec
from tamto_testing.processes import wait_for
from tamto_testing.waiting import long_tests_enabled

from ..programs import run_to_end

pytestmark = pytest.mark.e2e

TAMTO = [sys.executable, "-m", "tamto_cli"]


class Launcher:
    def __init__(self, data_dir: Path, log: Path) -> None:
        self.data_dir = data_dir
        self.log = log
        self.gateway, self.etcd, self.nats = free_port(), free_port(), free_port()
        while self.etcd + 1 in (self.gateway, self.nats):
            self.etcd = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def args(self) -> list[str]:
        return [
            "--data-dir",
            str(self.data_dir),
            "--gateway-port",
            str(self.gateway),
            "--etcd-port",
            str(self.etcd),
            "--nats-port",
            str(self.nats),
        ]

    def run(self, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run `tamto up` with this launcher's ports and `extra` to its end, its output
        captured."""
        return run_to_end(
            [*TAMTO, "up", *self.args(), *extra], env={"COLUMNS": "200"}, timeout=timeout
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self, *extra: str, ready_s: float = 120) -> None:
        # The log is appended to: a second start waits for its own "Tamto is up".
        before = self.output().count("Tamto is up")
        with self.log.open("ab") as out:
            self.proc = proc = subprocess.Popen(
                [*TAMTO, "up", *self.args(), *extra],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "COLUMNS": "200"},
            )
        # Up, or ended (a failed start ends the launcher: no use waiting out `ready_s`).
        wait_for(
            lambda: self.output().count("Tamto is up") > before or proc.poll() is not None,
            ready_s,
            f"tamto up:\n{self.output()[-3000:]}",
        )
        assert self.output().count("Tamto is up") > before, f"tamto up:\n{self.output()[-3000:]}"

    def ready(self, timeout_s: float = 60) -> dict[str, Any]:
        """The JSON line `tamto up --json` prints once up; it comes a few lines after
        "Tamto is up", so it is waited for, not assumed there."""

        def line() -> str | None:
            return next((x for x in self.output().splitlines() if x.startswith("{")), None)

        wait_for(
            lambda: line() is not None, timeout_s, f"tamto up --json:\n{self.output()[-3000:]}"
        )
        ready: dict[str, Any] = json.loads(line() or "")
        return ready

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            "TAMTO_URL": f"tamto://127.0.0.1:{self.gateway}",
            "TAMTO_DATA_DIR": str(self.data_dir),
            "COLUMNS": "200",
        }
        return run_to_end([*TAMTO, *args], env=env, stdin=stdin)

    def status(self) -> dict[str, Any]:
        """`tamto status --json`: members, partitions and problems."""
        result = self.cli("status", "--json", "--etcd", f"127.0.0.1:{self.etcd}")
        assert result.returncode == 0, result.stderr
        status: dict[str, Any] = json.loads(result.stdout)
        return status

    def members(self) -> list[dict[str, Any]]:
        members: list[dict[str, Any]] = self.status()["members"]
        return members


@contextmanager
def launched(tmp_path: Path, *extra: str) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path / "data", tmp_path / "up.log")
    try:
        launcher.start(*extra)  # inside: a launcher that is slow to start is stopped too
        yield launcher
    except BaseException:
        print(f"tamto up's output, its end:\n{launcher.output()[-6000:]}")  # in the report
        raise
    finally:
        if launcher.proc is not None and launcher.proc.poll() is None:
            launcher.stop()


def forked(pid: int) -> bool:
    """Whether process `pid` was forked from a fork server (its command line is the
    server's: a fork without exec keeps it)."""
    return b"tamto_local.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()


async def registered_pids(etcd_endpoint: str, service: str) -> set[int]:
    """The pids `service`'s members registered in etcd."""
    etcd = await connect_etcd(parse_endpoints(etcd_endpoint))
    try:
        return {member.pid for member in await list_members(etcd, service)}
    finally:
        await etcd.close()


async def credential_recorded(etcd_endpoint: str) -> bool:
    """Whether the cluster's credential hash is in etcd (`tamto_common.cluster_credential`)."""
    etcd = await connect_etcd(parse_endpoints(etcd_endpoint))
    try:
        return await etcd.get(CREDENTIAL_KEY.encode()) is not None
    finally:
        await etcd.close()


def test_up_runs_every_service_and_restarts_one_killed_with_sigkill(tmp_path: Path) -> None:
    with launched(tmp_path, "--quiet") as up:
        members = up.members()
        services = sorted(m["service"] for m in members)
        assert services == ["auth", "gateway", "processing", "router", "storage"]
        assert all(m["health"] == "SERVING" for m in members)
        # Each was forked from the launcher's fork server (tamto_local.forking).
        assert all(forked(int(m["pid"])) for m in members), members
        # The gateway's HTTP API is on the port the launcher printed.
        http_api = re.search(r"HTTP API: (http://[0-9.:]+)", up.output())
        assert http_api is not None, up.output()
        assert httpx.get(f"{http_api.group(1)}/openapi.json").json()["openapi"] == "3.1.0"
        # And its MQTT broker: a CONNECT without credentials is answered CONNACK 4/5.
        mqtt = re.search(r"MQTT: ([0-9.]+):([0-9]+)", up.output())
        assert mqtt is not None, up.output()
        with socket.create_connection((mqtt.group(1), int(mqtt.group(2))), timeout=10) as s:
            s.sendall(bytes([0x10, 12, 0, 4, *b"MQTT", 4, 2, 0, 60, 0, 0]))
            connack = s.recv(4)
        assert connack[:2] == bytes([0x20, 2]), connack
        assert connack[3] in (4, 5), connack  # bad user name or password / not authorized
        # Its cluster secret is private, and a service recorded its hash in
        # etcd: the restart below on the same directory joins with the same secret.
        assert stat.S_IMODE((up.data_dir / "cluster-secret").stat().st_mode) == 0o600
        assert asyncio.run(credential_recorded(f"127.0.0.1:{up.etcd}"))

        storage_pid = next(int(m["pid"]) for m in members if m["service"] == "storage")
        os.kill(storage_pid, signal.SIGKILL)
        killed_at = time.monotonic()

        # Read etcd in-process: a `tamto status` per poll takes seconds on a loaded machine,
        # which made the leave look later than it was.
        def storage_pids() -> set[int]:
            return asyncio.run(registered_pids(f"127.0.0.1:{up.etcd}", "storage"))

        wait_for(lambda: storage_pid not in storage_pids(), 30, "the killed storage to leave etcd")
        # Lease TTL 5 s, plus polling slack: 3 s with TAMTO_LONG_TESTS=1, 10 s in CI, where
        # each poll connects to etcd on a loaded machine (a registration without a lease
        # would never leave).
        assert time.monotonic() - killed_at < 5 + (3 if long_tests_enabled() else 10)
        wait_for(
            lambda: "storage exited with code -9; restarting it" in up.output(),
            30,
            "the launcher to report the crash",
        )
        wait_for(lambda: "storage is back" in up.output(), 60, "storage to restart")
        new = [m for m in up.members() if m["service"] == "storage"]
        assert len(new) == 1
        assert new[0]["pid"] != storage_pid
        assert new[0]["health"] == "SERVING"
        assert forked(int(new[0]["pid"]))

        assert up.cli("stream", "ensure", "kept").returncode == 0
        published = up.cli("pub", "kept", stdin="one\ntwo\nthree\n")
        assert published.returncode == 0, published.stderr
        assert published.stdout.count("kept/0@") == 3
        # `tamto status` counts the partitions the router owns now (its claim in etcd).
        (router,) = [m for m in up.members() if m["service"] == "router"]
        assert router["partitions"] >= 1, router
        assert "kept/0" in up.cli("status", "--etcd", f"127.0.0.1:{up.etcd}").stdout
        assert up.stop() == 0
    assert "etcd stopped" in up.output()

    # Start again on the same data directory: what was acknowledged is still there.
    with launched(tmp_path, "--quiet") as up:
        consumed = up.cli("sub", "kept", "--subscription", "after-restart", "--count", "3")
        assert consumed.returncode == 0, consumed.stderr
        assert [line.split("\t")[-1] for line in consumed.stdout.splitlines()] == [
            "one",
            "two",
            "three",
        ]


def test_up_demo_publishes_and_consumes_then_stops(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path / "data", tmp_path / "up.log")
    # --no-fork: each service starts as `python -m tamto_<service>`, the entry point
    # users' deployments run (the other tests here fork them).
    result = launcher.run("--demo", "--once", "--quiet", "--no-fork")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "fork server" not in result.stdout
    assert "published 1000 messages" in result.stdout
    assert "consumed and acked 1000 messages" in result.stdout


def test_up_refuses_a_port_in_use_with_one_line(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path / "data", tmp_path / "up.log")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", launcher.gateway))
        busy.listen()
        result = launcher.run("--quiet", timeout=60)
    assert result.returncode == 1
    assert f"--gateway-port 127.0.0.1:{launcher.gateway} is already in use" in result.stdout


def test_up_refuses_a_discovery_setting_that_is_not_an_srv_record(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path / "data", tmp_path / "up.log")
    result = launcher.run("--discovery", "_tamto._tcp.example.org", timeout=60)
    assert result.returncode == 2
    assert "tamto up: invalid --discovery: expected srv:<record name>" in result.stderr
    assert not (tmp_path / "data").exists(), "nothing was started"


def test_up_with_an_s3_segment_store_runs_seaweedfs_and_seals_into_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--segment-store s3`: SeaweedFS starts under the data directory, and the demo's
    messages reach its bucket as segments (and the Iceberg catalog) once sealed."""
    # Sealed 1 s after their ack (5 s by default): `tamto up` hands its environment on.
    monkeypatch.setenv("TAMTO_STORAGE_SEAL_AGE_MS", "1000")
    launcher = Launcher(tmp_path / "data", tmp_path / "up.log")
    launcher.start("--segment-store", "s3", "--demo")
    try:
        assert (launcher.data_dir / "seaweedfs" / "s3.json").is_file()
        endpoint = launcher.output().split("endpoint_override=", 1)[1].split("&", 1)[0]

        def rows_in_store() -> int:
            s3 = S3Spec(launcher.data_dir, ports={"s3.port": int(endpoint.split(":")[1])})
            dataset = ds.dataset(
                "tamto/segments/streams/demo", filesystem=s3.filesystem(), partitioning="hive"
            )
            return int(dataset.count_rows())

        # The demo's 1000 messages, once sealed.
        wait_for(
            lambda: rows_in_store() == 1000,
            60,
            f"the demo in the store:\n{launcher.output()[-3000:]}",
        )
        assert (launcher.data_dir / "iceberg.db").is_file()
    finally:
        assert launcher.stop() == 0
