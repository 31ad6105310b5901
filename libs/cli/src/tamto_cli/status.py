"""`tamto status`: the members registered in etcd, with their health and version, and
what needs an operator's attention on them (batches a storage node quarantined,
ledgers a router writes with a replica that takes no appends, a storage node that does
not answer, partitions a router owns without a quorum), and every partition's ledgers
with their replicas: unavailable, under-replicated and healing ones with their causes
(`tamto_cli.ledger_health`, docs/cluster.md)."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Mapping, Sequence

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from tamto_cli.ledger_health import (
    HEALING,
    UNAVAILABLE,
    UNDER_REPLICATED,
    UP,
    Healing,
    Problem,
    all_problems,
    replica_states,
)
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
#: The router's gauge of the replicas it heals, by stream, partition, replica and reason
#: (`tamto_router.healing_metric`).
HEALING_METRIC = "tamto_router_healing_replicas"


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


async def fetch_pages(rows: list[tuple[Member, str]]) -> dict[str, list[Metric]]:
    """The metrics of every serving storage node and router, by member key (a node that
    does not answer has none)."""
    noted = [m for m, health in rows if m.service in ("storage", "router") and health == "SERVING"]
    pages = await asyncio.gather(*(asyncio.to_thread(_scrape, m) for m in noted))
    return {m.key: page for m, page in zip(noted, pages, strict=True) if page}


async def fetch_notes(
    rows: list[tuple[Member, str]], drained: frozenset[str] = frozenset()
) -> dict[str, str]:
    """What needs attention, by member key, from the members' metrics pages alone
    (`member_notes` without the ledgers)."""
    return member_notes(rows, await fetch_pages(rows), drained)


def member_notes(
    rows: list[tuple[Member, str]],
    pages: Mapping[str, list[Metric]],
    drained: frozenset[str] = frozenset(),
    problems: Sequence[Problem] = (),
    owners: Mapping[tuple[str, int], str] | None = None,
) -> dict[str, str]:
    """What needs attention, by member key: for each serving storage node, the streams
    with quarantined batches and damaged files; for each serving router, its
    under-replicated ledgers; each router in `drained` (it owns no partitions until
    undrained); each storage node that does not answer, with the partitions it leaves
    short (`problems`); each router owning partitions without a quorum (`owners`)."""
    found: dict[str, list[str]] = {}
    for member, health in rows:
        notes = found.setdefault(member.key, [])
        if member.service == "router" and member.instance_id in drained:
            notes.append("drained (tamto node undrain)")
        if member.service == "storage" and health != "SERVING":
            notes.append(_hung_note(member.instance_id, problems))
        if member.service == "router":
            notes.extend(_owner_notes(member.instance_id, problems, owners or {}))
        page = pages.get(member.key)
        if page:
            notes.extend(_page_notes(page))
    return {key: "; ".join(notes) for key, notes in found.items() if notes}


def _hung_note(node: str, problems: Sequence[Problem]) -> str:
    short = [p for p in problems if p.state in (UNAVAILABLE, UNDER_REPLICATED) and node in p.nodes]
    unavailable = sum(1 for p in short if p.state == UNAVAILABLE)
    note = "not answering (hung?)"
    if short:
        note += f": {len(short)} ledgers short of it"
    if unavailable:
        note += f", {unavailable} without quorum"
    return note


def _owner_notes(
    router: str, problems: Sequence[Problem], owners: Mapping[tuple[str, int], str]
) -> list[str]:
    mine = [p for p in problems if owners.get((p.stream, p.partition)) == router]
    notes = []
    for state, what in ((UNAVAILABLE, "no quorum"), (HEALING, "healing")):
        names = sorted({f"{p.stream}/{p.partition}" for p in mine if p.state == state})
        if names:
            notes.append(f"{what}: {', '.join(names)}")
    return notes


def _scrape(member: Member) -> list[Metric]:
    """The metric families of the member's metrics page (blocking); none when it does
    not answer."""
    try:
        url = f"http://{member.metrics_address}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return []
    return list(text_string_to_metric_families(text))


def healing_from(pages: Mapping[str, list[Metric]]) -> dict[tuple[str, int], dict[str, str]]:
    """What the routers heal: (stream, partition) -> replica -> reason."""
    found: dict[tuple[str, int], dict[str, str]] = {}
    for families in pages.values():
        for family in families:
            if family.name != HEALING_METRIC:
                continue
            for sample in family.samples:
                labels = sample.labels
                if sample.value and labels.get("partition", "").isdigit():
                    key = (labels.get("stream", ""), int(labels["partition"]))
                    found.setdefault(key, {})[labels.get("replica", "")] = labels.get("reason", "")
    return found


def _page_notes(families: list[Metric]) -> list[str]:
    """``quarantined: <stream> <n>, ...; damaged: <stream>/<p> <n> files, ...`` (storage)
    or ``under-replicated: <n> ledgers ...`` (router) from a node's metrics."""
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
    return notes


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
    storage: Mapping[str, str],
    console: Console,
    owners: Mapping[tuple[str, int], str] | None = None,
    healing: Healing | None = None,
) -> None:
    """Every partition's ledgers: epoch, offsets, state and replicas, each replica that
    is down (not registered), not answering (`storage`: registered node -> health) or
    healing (`healing`) marked so, and on the last ledger's row the router that owns the
    partition now (`owners`; none while nobody claimed it since its owner left); then
    the counts and each unavailable, under-replicated or healing ledger with its cause."""
    if not lists:
        return
    table = Table(title="Ledgers (replicas marked down are not registered)")
    for column in ("partition", "epoch", "offsets", "state", "quorum", "replicas", "owner"):
        table.add_column(column)
    for ledgers in lists:
        key = (ledgers.stream, ledgers.partition)
        owner = (owners or {}).get(key, "none")
        for i, ledger in enumerate(ledgers.ledgers):
            current = i == len(ledgers.ledgers) - 1
            states = replica_states(
                ledger, storage, (healing or {}).get(key, {}) if current else {}
            )
            end = "" if ledger.last_offset is None else str(ledger.last_offset)
            table.add_row(
                f"{ledgers.stream}/{ledgers.partition}",
                str(ledger.epoch),
                f"{ledger.first_offset}-{end}",
                ledger.state,
                f"{ledger.ack_quorum} of {len(ledger.ensemble)}",
                ", ".join(_replica_cell(node, state) for node, (state, _) in states.items()),
                owner if current else "",
            )
    console.print(table)
    problems = all_problems(lists, storage, healing or {})
    counts = {
        s: sum(1 for p in problems if p.state == s)
        for s in (UNDER_REPLICATED, UNAVAILABLE, HEALING)
    }
    style = "red" if counts[UNDER_REPLICATED] or counts[UNAVAILABLE] else "green"
    console.print(
        f"[{style}]under-replicated ledgers: {counts[UNDER_REPLICATED] + counts[UNAVAILABLE]}, "
        f"unavailable: {counts[UNAVAILABLE]}, healing: {counts[HEALING]}[/]"
    )
    for problem in problems:
        console.print(
            f"[{'yellow' if problem.state == HEALING else 'red'}]{problem.line()}[/]",
            soft_wrap=True,
        )


def _replica_cell(node: str, state: str) -> str:
    if state == UP:
        return node
    return f"[{'yellow' if state == HEALING else 'red'}]{node} ({state})[/]"
