"""`tamto up --lease-ttl-s` and `tamto chaos --lease-ttl-s` set the lease TTL of every
service of the system they run (it was fixed at 5 s): failover waits that long."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

import tamto_cli.up
from tamto_cli.main import app
from tamto_local.cluster import ClusterConfig
from tamto_local.layout import ServiceEnv, service_env


def test_up_passes_its_lease_ttl_to_every_service(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    seen: list[ClusterConfig] = []

    async def run_up(config: ClusterConfig, *args: Any, **kwargs: Any) -> int:
        seen.append(config)
        return 0

    monkeypatch.setattr(tamto_cli.up, "run_up", run_up)
    result = CliRunner().invoke(app, ["up", "--data-dir", str(tmp_path), "--lease-ttl-s", "3"])
    assert result.exit_code == 0, result.output
    (config,) = seen
    assert config.lease_ttl_s == 3
    shared = ServiceEnv(
        config.etcd_endpoint, config.nats_url, tmp_path, "key", config.lease_ttl_s, "info"
    )
    assert service_env("router", shared, 1)["TAMTO_LEASE_TTL_S"] == "3"

    result = CliRunner().invoke(app, ["up", "--data-dir", str(tmp_path)])
    assert seen[-1].lease_ttl_s == 5, "the default"


@pytest.mark.parametrize("command", ["up", "chaos"])
def test_a_lease_ttl_below_one_second_is_refused(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--lease-ttl-s", "0"])
    assert result.exit_code == 2
    assert "--lease-ttl-s" in result.output
