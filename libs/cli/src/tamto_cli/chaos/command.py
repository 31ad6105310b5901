"""The `tamto chaos` command: options, progress lines, the report (Markdown, JSON)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tamto_cli.chaos.campaign import run_campaign
from tamto_cli.chaos.checker import render
from tamto_cli.chaos.network import NETWORK_KINDS
from tamto_cli.chaos.options import KINDS, TARGETS, ChaosOptions
from tamto_cli.options import LeaseTtl
from tamto_common.durable import write_atomic
from tamto_local.netlab import unavailable

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _names(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        err.print(f"tamto chaos: {what} must be some of {', '.join(allowed)}: {text!r}")
        raise typer.Exit(2)
    return names


#: `--kinds`: None is the default of the campaign (kill,stop; with --network the network ones).
Kinds = Annotated[
    str | None,
    typer.Option(
        help="kill (-9) and/or stop (SIGSTOP/SIGCONT); with --network also isolate, "
        "split, asymmetric, delay (default: kill,stop; with --network the network ones)."
    ),
]
#: `--network`.
Network = Annotated[
    bool,
    typer.Option(
        "--network",
        help="Run each node's storage node and router in a network namespace and hit "
        "links: isolate a node, split one from the rest, cut one way, delay (needs root, "
        "ip, iptables, ss; a cluster of 3 nodes unless --nodes says otherwise).",
    ),
]


def chaos(
    duration: Annotated[float, typer.Option(help="Seconds of faults.")] = 60.0,
    targets: Annotated[str, typer.Option(help="Processes to hit, comma-separated.")] = ",".join(
        TARGETS
    ),
    kinds: Kinds = None,
    producers: Annotated[int, typer.Option(help="Producers publishing with ids.")] = 2,
    rate: Annotated[int, typer.Option(help="Messages per second per producer.")] = 200,
    partitions: Annotated[int, typer.Option(help="Partitions of the campaign's stream.")] = 2,
    seed: Annotated[int | None, typer.Option(help="Seed of the random faults.")] = None,
    nodes: Annotated[
        int,
        typer.Option(
            help="Storage nodes and routers (a cluster as `tamto up --nodes`; R = min(3, N)); "
            "a fault hits one process of a target."
        ),
    ] = 1,
    network: Network = False,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="A fresh directory for the system (default: a temporary one)."),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the report as JSON here.")
    ] = None,
    lease_ttl_s: LeaseTtl = 5,
) -> None:
    """Run a local system and hit random processes with faults while clients publish and
    consume; report lost, duplicated, stalls beyond downtime and recovery per fault.

    Exits 1 when an acknowledged message was lost, one was stored twice, or a client
    stalled more than 1 s beyond the downtime of a fault; with --network also when two
    routers acked one partition at once (their own records), a replica was not whole at
    the end, or a stall exceeded the lease TTL plus 1 s beyond the fault.
    """
    if network:
        reason = unavailable()
        if reason is not None:
            err.print(f"tamto chaos --network: {reason}")
            raise typer.Exit(2)
    allowed = (*KINDS, *NETWORK_KINDS) if network else KINDS
    default_kinds = NETWORK_KINDS if network else KINDS
    try:
        options = ChaosOptions(
            duration_s=duration,
            targets=_names(targets, TARGETS, "--targets"),
            kinds=_names(kinds, allowed, "--kinds") if kinds is not None else default_kinds,
            producers=producers,
            rate=rate,
            partitions=partitions,
            seed=seed,
            nodes=3 if network and nodes == 1 else nodes,
            network=network,
            lease_ttl_s=lease_ttl_s,
        )
    except ValueError as exc:
        err.print(f"tamto chaos: {exc}")
        raise typer.Exit(2) from None

    def say(line: str) -> None:
        err.print(line)

    with tempfile.TemporaryDirectory(prefix="tamto-chaos-") as scratch:
        where = data_dir if data_dir is not None else Path(scratch)
        report = asyncio.run(run_campaign(options, where, say))
    console.print(render(report))
    if json_out is not None:
        document = dataclasses.asdict(report) | {"passed": report.passed}
        write_atomic(json_out, json.dumps(document, indent=2, default=str).encode())
    if not report.passed:
        raise typer.Exit(1)
