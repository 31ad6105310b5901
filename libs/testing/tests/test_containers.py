"""With TAMTO_TEST_CONTAINERS=1 the infrastructure really runs in containers."""

from __future__ import annotations

import pytest

from tamto_testing.infra import Infra, containers_requested

pytestmark = [
    pytest.mark.container,
    pytest.mark.skipif(
        not containers_requested(), reason="set TAMTO_TEST_CONTAINERS=1 with a Docker API"
    ),
]


def test_etcd_and_nats_run_as_containers(tamto_infra: Infra) -> None:
    import docker

    running = {tag for c in docker.from_env().containers.list() for tag in c.image.tags}
    assert "localhost/tamto-etcd:latest" in running
    assert "localhost/tamto-nats-server:latest" in running
