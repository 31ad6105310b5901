"""The commands that run and watch a whole system: `tamto up` starts one locally,
`tamto status` and `tamto top` show its members, partitions and traffic, and
`tamto scrape-targets` tells Prometheus where the members' metrics are.

Like every command module they import their heavy parts inside the command
(`tamto --help` loads none of them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tamto_cli import settings
from tamto_cli.extras import server_extra
from tamto_cli.options import AsJson, DataDir, LeaseTtl

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


#: `tamto up --netns`.
Netns = Annotated[
    bool,
    typer.Option(
        "--netns",
        help="run each node's storage node and router in a network namespace of its "
        "own (root, `ip`, `iptables`), to cut or delay its links by hand",
    ),
]

#: `tamto up --colocate`.
Colocate = Annotated[
    bool,
    typer.Option(
        help="run each node's router and storage node as one process (the router's "
        "appends to it in-process; one failure domain, docs/operations.md)"
    ),
]

#: `tamto up --fork/--no-fork`.
Fork = Annotated[
    bool,
    typer.Option(
        help="fork the services from a process that imported their libraries once "
        "(fast starts and restarts); --no-fork starts each as `python -m tamto_<service>`"
    ),
]


def up(
    data_dir: DataDir = None,
    gateway_port: Annotated[int, typer.Option(help="gateway port")] = 7400,
    etcd_port: Annotated[int, typer.Option(help="etcd client port (peer: +1)")] = 7379,
    nats_port: Annotated[int, typer.Option(help="NATS port")] = 7422,
    demo: Annotated[bool, typer.Option(help="publish and consume a demo stream")] = False,
    once: Annotated[bool, typer.Option(help="stop after starting (and the demo)")] = False,
    quiet: Annotated[bool, typer.Option(help="hide the services' logs")] = False,
    tls: Annotated[
        bool, typer.Option(help="TLS on every service port, mTLS between services (dev CA)")
    ] = False,
    nodes: Annotated[
        int,
        typer.Option(help="storage nodes and routers to run (more than 1: and two gateways)"),
    ] = 1,
    discovery: Annotated[
        str,
        typer.Option(
            help="services find etcd through this DNS SRV record (srv:<name>) instead of "
            "the launcher's address; it must name the etcd this launcher runs"
        ),
    ] = "",
    discovery_resolver: Annotated[
        str, typer.Option(help="host:port of the DNS server --discovery asks")
    ] = "",
    as_json: Annotated[
        bool,
        typer.Option("--json", help="logs to stderr; one JSON object on stdout once up"),
    ] = False,
    lease_ttl_s: LeaseTtl = 5,
    segment_store: Annotated[
        str,
        typer.Option(
            help="where storage nodes seal segments: 's3' (a SeaweedFS started here, data "
            "under the data directory), a file:// or s3:// URI, or empty for each node's "
            "data directory"
        ),
    ] = "",
    netns: Netns = False,
    colocate: Colocate = False,
    fork: Fork = True,
) -> None:
    """Start etcd, NATS and every service locally; Ctrl-C stops them all."""
    with server_extra("tamto up"):
        from tamto_cli.up import run_up
        from tamto_local.cluster import MAX_NODES, ClusterConfig
    _check_up(
        nodes,
        MAX_NODES,
        gateway_port,
        etcd_port,
        nats_port,
        discovery,
        discovery_resolver,
        segment_store,
    )
    _check_netns(netns, tls, colocate)
    discovered = {"TAMTO_DISCOVERY": discovery} if discovery else {}
    if discovery_resolver:
        discovered["TAMTO_DISCOVERY_RESOLVER"] = discovery_resolver
    config = ClusterConfig(
        data_dir=settings.data_dir(data_dir),
        extra_env=discovered,
        gateway_port=gateway_port,
        etcd_port=etcd_port,
        etcd_peer_port=etcd_port + 1,
        nats_port=nats_port,
        tls=tls,
        nodes=nodes,
        lease_ttl_s=lease_ttl_s,
        segment_store=segment_store,
        colocate=colocate,
        fork=fork,
    )
    shown = err if as_json else console
    code = asyncio.run(
        run_up(config, shown, demo=demo, once=once, quiet=quiet, as_json=as_json, netns=netns)
    )
    raise typer.Exit(code)


def _check_netns(netns: bool, tls: bool, colocate: bool) -> None:
    """Exit 2 when `tamto up --netns` cannot run here (not root, a tool missing) or is
    asked with --tls (the development certificates name loopback addresses) or with
    --colocate (it places storage nodes and routers apart)."""
    if not netns:
        return
    from tamto_local.netlab import unavailable

    reason = unavailable() or ("--netns does not take --tls" if tls else None)
    if colocate and reason is None:
        reason = "--netns does not take --colocate"
    if reason is not None:
        err.print(f"tamto up --netns: {reason}")
        raise typer.Exit(2)


def _check_up(
    nodes: int,
    max_nodes: int,
    gateway_port: int,
    etcd_port: int,
    nats_port: int,
    discovery: str,
    discovery_resolver: str,
    segment_store: str,
) -> None:
    """Exit 2 with one line on stderr on the first of `tamto up`'s options that is bad."""
    from tamto_common.config import discovery_check, resolver_check

    if not 1 <= nodes <= max_nodes:
        err.print(f"tamto up: invalid --nodes {nodes}: must be 1-{max_nodes}")
        raise typer.Exit(2)
    for name, port in (
        ("--gateway-port", gateway_port),
        ("--etcd-port", etcd_port),
        ("--nats-port", nats_port),
    ):
        if not 1 <= port <= 65534:
            err.print(f"tamto up: invalid {name} {port}: must be 1-65534")
            raise typer.Exit(2)
    for name, problem in (
        ("--discovery", discovery_check(discovery)),
        ("--discovery-resolver", resolver_check(discovery_resolver)),
    ):
        if problem:
            err.print(f"tamto up: invalid {name}: {problem}")
            raise typer.Exit(2)
    if segment_store not in ("", "s3") and not segment_store.startswith(("file://", "s3://")):
        err.print(f"tamto up: invalid --segment-store {segment_store!r}: s3, file:// or s3://")
        raise typer.Exit(2)


def status(
    etcd: Annotated[str, typer.Option(help="etcd endpoint", envvar="TAMTO_ETCD_ENDPOINTS")] = (
        settings.DEFAULT_ETCD
    ),
    as_json: AsJson = False,
) -> None:
    """List the registered members with their health and version, each router's
    partition count, notes on what needs attention (batches a storage node
    quarantined, ledgers a router writes with a replica catching up, a drained
    router, a storage node that does not answer, partitions owned without a quorum),
    and every partition's ledgers with their replicas and its owner: unavailable,
    under-replicated and healing ledgers with their causes. --json prints one object:
    members, partitions (owner, ledgers, replicas' states, problems) and problems."""
    from tamto_cli.ledger_health import all_problems, ledgers_json
    from tamto_cli.status import (
        fetch_drained,
        fetch_ledgers,
        fetch_owners,
        fetch_pages,
        fetch_status,
        healing_from,
        member_notes,
        partitions_per_router,
        render_ledgers,
        render_status,
    )
    from tamto_common.errors import TamtoError

    try:
        rows = asyncio.run(fetch_status(etcd))
        ledgers = asyncio.run(fetch_ledgers(etcd))
        drained = asyncio.run(fetch_drained(etcd))
        owners = asyncio.run(fetch_owners(etcd))
    except TamtoError as exc:
        err.print(f"tamto status: {exc}")
        raise typer.Exit(1) from None
    pages = asyncio.run(fetch_pages(rows))
    storage = {m.instance_id: h for m, h in rows if m.service == "storage"}
    healing = healing_from(pages)
    problems = all_problems(ledgers, storage, healing)
    notes = member_notes(rows, pages, drained, problems, owners)
    owned = partitions_per_router(owners)
    if as_json:
        members: list[dict[str, object]] = []
        for m, h in rows:
            entry: dict[str, object] = {**asdict(m), "health": h, "notes": notes.get(m.key, "")}
            if m.service == "router":
                entry["partitions"] = owned.get(m.instance_id, 0)
            members.append(entry)
        partitions = ledgers_json(ledgers, storage, healing, owners)
        found = [{**asdict(p), "nodes": list(p.nodes)} for p in problems]
        print(json.dumps({"members": members, "partitions": partitions, "problems": found}))
    else:
        render_status(rows, console, notes, owned)
        render_ledgers(ledgers, storage, console, owners, healing)


def top(
    etcd: Annotated[str, typer.Option(help="etcd endpoint", envvar="TAMTO_ETCD_ENDPOINTS")] = (
        settings.DEFAULT_ETCD
    ),
    interval: Annotated[
        float, typer.Option(help="seconds between refreshes (rates are over this long)")
    ] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="show one view and exit")] = False,
    as_json: AsJson = False,
) -> None:
    """A live view of throughput per stream, backlog per subscription, publish latency
    and each member's health, read from the members' metrics and refreshed in place
    until Ctrl-C (--once: one view, two samples --interval apart; with --json)."""
    from tamto_cli.top import as_json as view_json
    from tamto_cli.top import once as one_view
    from tamto_cli.top import render, run_top
    from tamto_common.errors import TamtoError

    if interval <= 0:
        err.print(f"tamto top: --interval must be positive, got {interval}")
        raise typer.Exit(2)
    try:
        if once or as_json:
            view = asyncio.run(one_view(etcd, interval))
            if as_json:
                print(json.dumps(view_json(view)))
            else:
                console.print(render(view))
        else:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(run_top(etcd, interval, console))
    except TamtoError as exc:
        err.print(f"tamto top: {exc}")
        raise typer.Exit(1) from None


def scrape_targets(
    out: Annotated[Path, typer.Argument(help="the file_sd JSON file to write")],
    etcd: Annotated[str, typer.Option(help="etcd endpoint", envvar="TAMTO_ETCD_ENDPOINTS")] = (
        settings.DEFAULT_ETCD
    ),
    every: Annotated[
        float, typer.Option(help="rewrite it every this many seconds until Ctrl-C (0: once)")
    ] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="say what was written as JSON")] = False,
) -> None:
    """Write the members registered in etcd as a Prometheus file_sd target list (their
    metrics addresses, labelled job=<service> and instance=<instance id>), which
    infra/prometheus/prometheus.yml reads."""
    from tamto_cli.scrape_targets import keep_writing, write_targets
    from tamto_common.errors import TamtoError

    try:
        if every > 0:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(keep_writing(etcd, out, every))
        else:
            count = asyncio.run(write_targets(etcd, out))
            if as_json:
                print(json.dumps({"file": str(out), "targets": count}))
            else:
                console.print(f"{count} targets written to {out}")
    except TamtoError as exc:
        err.print(f"tamto scrape-targets: {exc}")
        raise typer.Exit(1) from None
