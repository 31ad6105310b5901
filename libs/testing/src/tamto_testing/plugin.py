"""pytest fixtures: real infrastructure, chained infra -> cluster -> client.

- `tamto_infra` (session): running etcd and NATS.
- `etcd_endpoint`, `nats_url` (session): their addresses.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
