"""`tamto status`: the members registered in etcd, with their health and version, and
what needs an operator's attention on them (batches a storage node quarantined,
ledgers a router writes with a replica that takes no appends), and every partition's
ledgers with their replicas (docs/cluster.md: under-replicated ones are marked)."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from tamto_common.config import parse_endpoints
from tamto_common.health import grpc_healthy
from tamto_common.ledgers import LedgerList, list_ledgers
from tamto_common.membership import Member, connect_etcd, list_members
from tamto_common.placement import read_owners, read_placement


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


#: Storage's gauge of batches kept aside because they could not be sealed
#: (`tamto_storage.quarantine`), per stream.
QUARANTINED_METRIC = "tamto_storage_quarantined_batches"
#: The router's gauge of open ledgers with a replica taking no appends (down, or
#: being caught up: `tamto_router.partitions`).
UNDER_REPLICATED_METRIC = "tamto_router_under_replicated_ledgers"
#: Storage's gauge of damaged files found in an open partition (`tamto storage verify`
#: and `repair` deal with them), per stream and partition.
DAMAGED_METRIC = "tamto_storage_damaged_files"


async def fetch_ledgers(etcd_endpoint: str) -> list[LedgerList]:
    """Every partition's ledger list (`tamto_common.ledgers`)."""
    client = await connect_etcd(parse_endpoints(etcd_endpoint), timeout_s=3)
    try:
        return await list_ledgers(client)
    finally:
        await client.close()


async def fetch_owners(etcd_endpoint: str) -> dict[tuple[str, int], str]:
    """(stream, partition) -> the router that claimed it now (`tamto_common.placement`)."""
    client = await connect_etcd(parse_endpoints(etcd_endpoint), timeout_s=3)
    try:
        return await read_owners(client)
    finally:
        await client.close()


def partitions_per_router(owners: Mapping[tuple[str, int], str]) -> dict[str, int]:
    """How many partitions each router owns now."""
    counts: dict[str, int] = {}
    for router in owners.values():
        counts[router] = counts.get(router, 0) + 1
    return counts


async def fetch_drained(etcd_endpoint: str) -> frozenset[str]:
    """The routers an operator drained (`tamto node drain`, `tamto_common.placement`)."""
    client = await connect_etcd(parse_endpoints(etcd_endpoint), timeout_s=3)
    try:
        return (await read_placement(client)).drained
    finally:
        await client.close()


async def fetch_notes(
    rows: list[tuple[Member, str]], drained: frozenset[str] = frozenset()
) -> dict[str, str]:
    """What needs attention, by member key: for each serving storage node, the streams
    with quarantined batches; for each serving router, its under-replicated ledgers
    (from their metrics pages; a node that does not answer has no note); and each
    router in `drained` (it owns no partitions until undrained)."""
    noted = [m for m, health in rows if m.service in ("storage", "router") and health == "SERVING"]
    notes = await asyncio.gather(*(asyncio.to_thread(_quarantine_note, m) for m in noted))
    found = {m.key: note for m, note in zip(noted, notes, strict=True) if note}
    for member, _ in rows:
        if member.service == "router" and member.instance_id in drained:
            found[member.key] = "; ".join(
                x for x in ("drained (tamto node undrain)", found.get(member.key)) if x
            )
    return found


def _quarantine_note(member: Member) -> str:
    """``quarantined: <stream> <n>, ...; damaged: <stream>/<p> <n> files, ...`` (storage)
    or ``under-replicated: <n> ledgers ...`` (router) from the node's metrics page
    (blocking)."""
    try:
        url = f"http://{member.metrics_address}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return ""
    families = list(text_string_to_metric_families(text))
    counts = {
        sample.labels.get("stream", ""): int(sample.value)
        for family in families
        if family.name == QUARANTINED_METRIC
        for sample in family.samples
        if sample.value
    }
    damaged = {
        f"{sample.labels.get('stream', '')}/{sample.labels.get('partition', '')}": int(sample.value)
        for family in families
        if family.name == DAMAGED_METRIC
        for sample in family.samples
        if sample.value
    }
    notes = []
    lagging = sum(
        int(sample.value)
        for family in families
        if family.name == UNDER_REPLICATED_METRIC
        for sample in family.samples
    )
    if lagging:
        notes.append(f"under-replicated: {lagging} ledgers (replicas catching up)")
    if counts:
        notes.append("quarantined: " + ", ".join(f"{s} {n}" for s, n in sorted(counts.items())))
    if damaged:
        files = ", ".join(f"{p} {n} files" for p, n in sorted(damaged.items()))
        notes.append(f"damaged: {files} (tamto storage verify)")
    return "; ".join(notes)


def render_status(
    rows: list[tuple[Member, str]],
    console: Console,
    notes: Mapping[str, str] | None = None,
    owned: Mapping[str, int] | None = None,
) -> None:
    """The members table; `owned` gives each router's partition count
    (`partitions_per_router`)."""
    table = Table(title="Tamto members")
    columns = ("service", "instance", "address", "health", "version", "pid", "up")
    for column in (*columns, "partitions", "notes"):
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
            str((owned or {}).get(member.instance_id, 0)) if member.service == "router" else "",
            f"[red]{notes.get(member.key, '')}[/]" if notes else "",
        )
    console.print(table)


def under_replicated(ledgers: LedgerList, storage: set[str]) -> list[int]:
    """The epochs of a partition's ledgers with a replica not among the registered
    `storage` nodes (it holds fewer live copies than its ensemble)."""
    return [x.epoch for x in ledgers.ledgers if not set(x.ensemble) <= storage]


def render_ledgers(
    lists: list[LedgerList],
    storage: set[str],
    console: Console,
    owners: Mapping[tuple[str, int], str] | None = None,
) -> None:
    """Every partition's ledgers: epoch, offsets, state and replicas, a replica that is
    not registered marked down (the ledger is under-replicated), and on the last
    ledger's row the router that owns the partition now (`owners`; none while nobody
    claimed it since its owner left)."""
    if not lists:
        return
    table = Table(title="Ledgers (replicas marked down are not registered)")
    for column in ("partition", "epoch", "offsets", "state", "quorum", "replicas", "owner"):
        table.add_column(column)
    count = 0
    for ledgers in lists:
        short = under_replicated(ledgers, storage)
        count += len(short)
        owner = (owners or {}).get((ledgers.stream, ledgers.partition), "none")
        for i, ledger in enumerate(ledgers.ledgers):
            end = "" if ledger.last_offset is None else str(ledger.last_offset)
            replicas = ", ".join(
                node if node in storage else f"[red]{node} (down)[/]" for node in ledger.ensemble
            )
            table.add_row(
                f"{ledgers.stream}/{ledgers.partition}",
                str(ledger.epoch),
                f"{ledger.first_offset}-{end}",
                ledger.state,
                f"{ledger.ack_quorum} of {len(ledger.ensemble)}",
                replicas,
                owner if i == len(ledgers.ledgers) - 1 else "",
            )
    console.print(table)
    style = "red" if count else "green"
    console.print(f"[{style}]under-replicated ledgers: {count}[/]")
