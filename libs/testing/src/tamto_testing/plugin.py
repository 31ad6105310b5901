"""pytest fixtures: real infrastructure, chained infra -> cluster -> client.

- `tamto_infra` (session): running etcd and NATS.
- `etcd_endpoint`, `nats_url` (session): their addresses.
- `tamto_cluster` (module): auth, storage, router and gateway as processes.
- `fresh_cluster` (function): a cluster of its own, for tests that crash services.
- `tamto_client` (function): an SDK client connected to `tamto_cluster`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import tamto_sdk
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra, running_infra


@pytest.fixture(scope="session")
def tamto_infra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Infra]:
    with running_infra(tmp_path_factory.mktemp("infra")) as infra:
        yield infra


@pytest.fixture(scope="session")
def etcd_endpoint(tamto_infra: Infra) -> str:
    return tamto_infra.etcd_endpoint


@pytest.fixture(scope="session")
def nats_url(tamto_infra: Infra) -> str:
    return tamto_infra.nats_url


@pytest.fixture(scope="module")
def tamto_cluster(
    tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestCluster]:
    cluster = TestCluster(tmp_path_factory.mktemp("cluster"), tamto_infra)
    try:
        yield cluster.start_all()
    finally:
        cluster.stop_all()


@pytest.fixture
def fresh_cluster(tamto_infra: Infra, tmp_path: Path) -> Iterator[TestCluster]:
    cluster = TestCluster(tmp_path / "cluster", tamto_infra)
    try:
        yield cluster.start_all()
    finally:
        cluster.stop_all()


@pytest.fixture
async def tamto_client(tamto_cluster: TestCluster) -> AsyncIterator[tamto_sdk.Client]:
    async with await tamto_sdk.connect(tamto_cluster.url, api_key=tamto_cluster.credential) as c:
        yield c
