"""A test cluster's members as etcd lists them, and their Prometheus metrics."""

from __future__ import annotations

import asyncio
import urllib.request

from tamto_cli.status import fetch_status
from tamto_common.membership import Member
from tamto_testing.cluster import TestCluster


async def own_members(cluster: TestCluster) -> dict[str, Member]:
    """service -> member, for this cluster's registrations in etcd."""
    rows = await fetch_status(cluster.infra.etcd_endpoint)
    return {m.service: m for m, _ in rows if m.instance_id == cluster.instance_id(m.service)}


def scrape(member: Member) -> str:
    """The member's /metrics page (blocking)."""
    with urllib.request.urlopen(f"http://{member.metrics_address}/metrics", timeout=5) as r:
        return str(r.read().decode())


async def metrics_of(cluster: TestCluster, service: str) -> str:
    """The /metrics page of the cluster's `service`."""
    member = (await own_members(cluster))[service]
    return await asyncio.to_thread(scrape, member)


async def process_member(cluster: TestCluster, name: str) -> Member:
    """The registration of the cluster's process `name` (`gateway-2`, `router-3`, ...)."""
    rows = await fetch_status(cluster.infra.etcd_endpoint)
    [member] = [m for m, _ in rows if m.instance_id == cluster.instance_id(name)]
    return member


async def process_metrics(cluster: TestCluster, name: str) -> str:
    """The /metrics page of the cluster's process `name`."""
    return await asyncio.to_thread(scrape, await process_member(cluster, name))


def gauge(metrics: str, name: str) -> float:
    """The sum of a metric's samples on a /metrics page."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(name) and line[len(name)] in " {"
    )


async def resident_bytes(cluster: TestCluster, service: str) -> float:
    """The resident memory of the cluster's `service` process, in bytes."""
    return gauge(await metrics_of(cluster, service), "process_resident_memory_bytes")
