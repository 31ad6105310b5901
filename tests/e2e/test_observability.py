"""Every service exposes health, metrics, bus events and traces, and deregisters on SIGTERM."""

from __future__ import annotations

import asyncio

import nats
import pytest

import tamto_sdk
from tamto_testing.cluster import TestCluster
from tamto_testing.processes import wait_for

from .members import own_members, scrape

pytestmark = pytest.mark.e2e


async def test_every_service_serves_prometheus_metrics(tamto_cluster: TestCluster) -> None:
    through_gateway = tamto_sdk.ClientOptions(direct=False)
    for options in (through_gateway, tamto_sdk.ClientOptions()):  # and the direct path
        async with tamto_sdk.connect(
            tamto_cluster.url, api_key=tamto_cluster.credential, options=options
        ) as c:
            await c.streams.ensure("metered", partitions=1)
            async with c.producer("metered") as producer:
                await producer.send_and_wait(b"count me")
    members = await own_members(tamto_cluster)
    assert set(members) == {"auth", "storage", "router", "gateway"}
    texts = {name: await asyncio.to_thread(scrape, m) for name, m in members.items()}
    assert 'code="OK",method="/tamto.v1.Gateway/Publish"' in texts["gateway"]
    assert 'code="OK",method="/tamto.v1.Router/Append"' in texts["router"]
    assert 'code="OK",method="/tamto.v1.Router/Publish"' in texts["router"]
    assert "tamto_storage_fsync_seconds_count" in texts["storage"]
    assert 'code="OK",method="/tamto.v1.Auth/Authenticate"' in texts["auth"]


async def test_a_service_announces_itself_on_the_bus_and_leaves_etcd_on_sigterm(
    fresh_cluster: TestCluster,
) -> None:
    bus = await nats.connect(fresh_cluster.infra.nats_url)
    try:
        events = await bus.subscribe("tamto.events.member.>")
        await bus.flush()  # the subscription is registered before anything happens

        async def next_router_event() -> str:
            # Other services may announce themselves too (a re-registration after a
            # lease lost under load): only the router's events are about this test.
            while True:
                event = await events.next_msg(timeout=10)
                if b'"service": "router"' in event.data:
                    return str(event.subject)

        assert fresh_cluster.stop("router") == 0
        assert await next_router_event() == "tamto.events.member.down"
        # Deregistered at once, not after the lease runs out.
        assert "router" not in await own_members(fresh_cluster)
        fresh_cluster.start("router")
        assert await next_router_event() == "tamto.events.member.up"
    finally:
        await bus.close()


def test_tracing_exports_a_span_per_call_when_enabled(fresh_cluster: TestCluster) -> None:
    fresh_cluster.stop("storage")
    proc = fresh_cluster.start("storage", extra_env={"TAMTO_TRACE_EXPORTER": "console"})
    # Readiness polled the health service; its spans reach the console exporter in batches.
    fresh_cluster.stop("storage")
    wait_for(
        lambda: '"name": "/grpc.health.v1.Health/Check"' in proc.log_path.read_text(),
        10,
        "a health-check span in the storage log",
    )
