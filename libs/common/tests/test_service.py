"""`service.serve`: a service reports SERVING on gRPC health only once it is
registered in etcd, so that whoever waits for SERVING (`tamto up`, test clusters,
an operator's probe) finds it among the members.

gRPC's health service answers SERVING for the whole server ("") from its start:
a service whose registration was slow (etcd loaded or paused) reported SERVING
with no member key, and a test that waited for SERVING found no gateway.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal

import pytest

from tamto_common import service
from tamto_common.config import ServiceConfig, load_config, parse_endpoints
from tamto_common.health import grpc_healthy
from tamto_common.membership import Registration, connect_etcd, list_members
from tamto_common.service import Runtime
from tamto_testing.grpc_servers import listen
from tamto_testing.waiting import eventually


async def test_a_service_serves_only_once_registered(
    monkeypatch: pytest.MonkeyPatch, etcd_endpoint: str, nats_url: str
) -> None:
    registering = asyncio.Event()
    release = asyncio.Event()

    class SlowRegistration(Registration):
        async def _first_grant(self) -> None:
            registering.set()
            await release.wait()
            await super()._first_grant()

    monkeypatch.setattr(service, "Registration", SlowRegistration)
    monkeypatch.setattr(service, "freeze_startup_objects", lambda: None)  # not in pytest
    instance = f"probe-{secrets.token_hex(3)}"
    config = load_config(
        ServiceConfig,
        "probe",
        ["--etcd-endpoints", etcd_endpoint, "--nats-url", nats_url, "--instance-id", instance],
        {},
    )
    ports: list[int] = []

    async def setup(config: ServiceConfig, runtime: Runtime) -> None:
        ports.append(listen(runtime.server))  # a port of the test's

    etcd = await connect_etcd(parse_endpoints(etcd_endpoint))
    serving = asyncio.create_task(service.serve("probe", config, setup))
    try:
        await asyncio.wait_for(registering.wait(), 60)
        address = f"127.0.0.1:{ports[0]}"
        assert not await grpc_healthy(address), "SERVING before it registered"
        assert not await grpc_healthy(address, "tamto.v1.Probe")
        release.set()

        async def healthy() -> bool:
            return await grpc_healthy(address)

        await eventually(healthy, 60, "the service to serve once registered")
        members = await list_members(etcd, "probe")
        assert instance in {m.instance_id for m in members}, "SERVING, and registered"
        assert await grpc_healthy(address, "tamto.v1.Probe")
    finally:
        release.set()
        os.kill(os.getpid(), signal.SIGTERM)  # serve's own way to stop (its signal handler)
        try:
            await asyncio.wait_for(serving, 60)
        finally:
            await etcd.close()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):  # serve's, gone
                loop.remove_signal_handler(sig)
