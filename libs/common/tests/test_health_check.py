"""`python -m tamto_common.health SERVICE`, a container's health check, asks a real gRPC
health service at the port the service's settings name, and exits 0 only when it serves."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from tamto_common.health import main
from tamto_local.ports import free_port
from tamto_testing.grpc_servers import listen

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
async def health() -> AsyncIterator[tuple[health_aio.HealthServicer, int]]:
    """A gRPC server with only the health service, on all addresses, and its port."""
    server = grpc.aio.server()
    servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = listen(server, "0.0.0.0")
    await server.start()
    try:
        yield servicer, port
    finally:
        await server.stop(None)


async def check(env: dict[str, str]) -> int:
    return await asyncio.to_thread(main, ["storage"], env)


async def test_a_serving_process_passes_through_the_module_entry_point(
    health: tuple[health_aio.HealthServicer, int],
) -> None:
    servicer, port = health
    await servicer.set("", SERVING)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tamto_common.health",
        "storage",
        env={**os.environ, "TAMTO_HOST": "0.0.0.0", "TAMTO_STORAGE_PORT": str(port)},
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()


async def test_a_process_not_serving_or_not_there_fails(
    health: tuple[health_aio.HealthServicer, int],
) -> None:
    servicer, port = health
    await servicer.set("", NOT_SERVING)
    assert await check({"TAMTO_PORT": str(port)}) == 1
    # The advertised host is dialled when set (what a TLS certificate names).
    await servicer.set("", SERVING)
    assert await check({"TAMTO_PORT": str(port), "TAMTO_ADVERTISE_HOST": "127.0.0.1"}) == 0
    # Nothing listens there.
    assert await check({"TAMTO_PORT": str(free_port())}) == 1


async def test_without_a_fixed_port_it_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert await check({}) == 2
    assert "the health check needs the service's fixed gRPC port" in capsys.readouterr().err
