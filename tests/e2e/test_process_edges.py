"""Bad config and busy ports stop a service with one clear line and a non-zero exit."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from ..programs import run_to_end

SERVICES = ["gateway", "router", "storage", "auth"]


def run_service(
    name: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_to_end([sys.executable, "-m", f"tamto_{name}", *args], env=env)


@pytest.mark.parametrize("name", SERVICES)
def test_a_bad_flag_value_is_one_line_naming_the_setting(name: str) -> None:
    result = run_service(name, "--lease-ttl-s", "soon")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"tamto-{name}: invalid setting --lease-ttl-s: expected an integer, got 'soon'"
    ]


def test_a_bad_environment_value_names_the_variable() -> None:
    result = run_service("router", env={"TAMTO_ROUTER_PORT": "70000"})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "tamto-router: invalid setting --port / TAMTO_ROUTER_PORT: "
        "must be a port number 0-65535, got 70000"
    )


def test_a_port_in_use_is_one_line(etcd_endpoint: str, nats_url: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_service(
            "router",
            "--port",
            str(port),
            env={"TAMTO_ETCD_ENDPOINTS": etcd_endpoint, "TAMTO_NATS_URL": nats_url},
        )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"tamto-router: invalid setting --port: cannot listen on 127.0.0.1:{port}: "
        "address already in use"
    )
