"""`tamto status`: the members registered in etcd, with their health and version."""

from __future__ import annotations

import asyncio
import time

from rich.console import Console
from rich.table import Table

from tamto_common.config import parse_endpoints
from tamto_common.membership import Member, connect_etcd, list_members
from tamto_local.cluster import grpc_healthy


async def _health(member: Member) -> str:
    try:
        return "SERVING" if await grpc_healthy(member.address) else "NOT_SERVING"
    except Exception:
        return "UNREACHABLE"


async def fetch_status(etcd_endpoint: str) -> list[tuple[Member, str]]:
    client = await connect_etcd(parse_endpoints(etcd_endpoint), timeout_s=3)
    try:
        members = await list_members(client)
    finally:
        await client.close()
    health = await asyncio.gather(*(_health(m) for m in members))
    return list(zip(members, health, strict=True))


def render_status(rows: list[tuple[Member, str]], console: Console) -> None:
    table = Table(title="Tamto members")
    for column in ("service", "instance", "address", "health", "version", "pid", "up"):
        table.add_column(column)
    now = time.time()
    for member, health in rows:
        style = "green" if health == "SERVING" else "red"
        table.add_row(
            member.service,
            member.instance_id,
            member.address,
            f"[{style}]{health}[/]",
            member.version,
            str(member.pid),
            f"{now - member.started_at:.0f}s",
        )
    console.print(table)
