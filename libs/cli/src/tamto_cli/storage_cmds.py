"""`tamto storage verify` and `tamto storage repair`: an operator's tools for damaged files.

Both act on a storage node's data directory while that node is stopped (see
`tamto_storage.scrub` for what is checked and what each repair does, and the
docs/operations.md, Operations, for the procedure). Every repair is an audit record
(JSON lines, `tamto_common.audit`) in ``<data-dir>/audit.jsonl`` unless
``--audit-file`` says otherwise.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tamto_cli.extras import server_extra
from tamto_cli.options import AsJson
from tamto_cli.output import report

if TYPE_CHECKING:  # the storage package comes with the server extra; imported when run
    from tamto_storage.scrub import Finding, HeldElsewhere, Repaired

storage_app = typer.Typer(help="Check and repair a stopped storage node's files.")

StorageDir = Annotated[
    Path, typer.Option("--data-dir", help="the storage node's data directory (node stopped)")
]
Stream = Annotated[str | None, typer.Option(help="only this stream")]
PartitionOpt = Annotated[int | None, typer.Option(help="only this partition (with --stream)")]
SegmentStoreOpt = Annotated[
    str,
    typer.Option(
        "--segment-store",
        envvar="TAMTO_STORAGE_SEGMENT_STORE",
        help="the cluster's segment store URI (as the node's --segment-store): segments the "
        "node reclaimed because the store holds them are not missing",
    ),
]
AUDIT_FILE = "audit.jsonl"


def _held(segment_store: str) -> HeldElsewhere | None:
    """What the segment store holds, or None without one."""
    if not segment_store:
        return None
    from tamto_storage.segment_store import SegmentStore
    from tamto_storage.store_held import StoreHeld

    return StoreHeld(SegmentStore.open(segment_store))


def processes_using(directory: Path) -> list[int]:
    """The ids of processes holding a file under `directory` open (Linux /proc; others
    are skipped): a running storage node keeps its WAL files open."""
    root = str(directory.resolve())
    found = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            links = [os.readlink(fd) for fd in fd_dir.iterdir()]
        except OSError:  # gone, or not ours to look at
            continue
        if any(link == root or link.startswith(root + os.sep) for link in links):
            found.add(int(fd_dir.parent.name))
    found.discard(os.getpid())
    return sorted(found)


def _finding_dict(finding: Finding) -> dict[str, object]:
    return {**asdict(finding), "file": str(finding.file)}


@storage_app.command("verify")
def storage_verify(
    data_dir: StorageDir,
    stream: Stream = None,
    partition: PartitionOpt = None,
    segment_store: SegmentStoreOpt = "",
    as_json: AsJson = False,
) -> None:
    """Check every segment, manifest, WAL, cursor and epoch file; exit 1 if any is damaged
    or missing."""
    with server_extra("tamto storage verify"):
        from tamto_storage.scrub import verify
    findings = verify(data_dir, stream, partition, _held(segment_store))
    if as_json:
        print(json.dumps([_finding_dict(f) for f in findings]))
    elif not findings:
        typer.echo(f"{data_dir}: no damage found")
    for finding in findings if not as_json else ():
        typer.echo(f"DAMAGED {finding.describe()}")
    raise typer.Exit(1 if findings else 0)


@storage_app.command("repair")
def storage_repair(
    data_dir: StorageDir,
    stream: Stream = None,
    partition: PartitionOpt = None,
    audit_file: Annotated[
        Path | None, typer.Option(help="append audit records here (default <data-dir>/audit.jsonl)")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    segment_store: SegmentStoreOpt = "",
    as_json: AsJson = False,
) -> None:
    """Return damaged partitions to service: damaged files move to _damaged/, every WAL frame
    that checks out is kept, the offsets no intact file holds are recorded as lost (audited),
    and the partition accepts publishes again. A second run finds nothing to do. With --json
    (which needs --yes): one JSON object, the findings, what was repaired and what is still
    damaged."""
    from tamto_common.audit import ADMIN, AuditLog

    with server_extra("tamto storage repair"):
        from tamto_storage.scrub import repair, verify
    busy = processes_using(data_dir)
    if busy:
        typer.echo(
            f"{data_dir} is in use by process {', '.join(map(str, busy))}: "
            "stop the storage node first",
            err=True,
        )
        raise typer.Exit(2)
    if as_json and not yes:
        typer.echo("tamto storage repair: --json needs --yes (it asks nothing)", err=True)
        raise typer.Exit(2)
    findings = verify(data_dir, stream, partition, _held(segment_store))
    repaired: list[dict[str, object]] = []
    if not findings:
        text = f"{data_dir}: no damage found, nothing to repair"
        report(as_json, text, {"damaged": [], "repaired": [], "still_damaged": []})
        return
    for finding in findings:
        if not as_json:
            typer.echo(f"DAMAGED {finding.describe()}")
    if not yes and not typer.confirm("Repair these (the offsets they hold are lost)?"):
        raise typer.Exit(1)
    audit = AuditLog("storage", audit_file or data_dir / AUDIT_FILE, None)
    actor = getpass.getuser()

    def record(done: Repaired) -> None:
        f = done.finding
        where = f.stream if f.partition is None else f"{f.stream}/{f.partition}"
        lost = f"; offsets {done.lost} lost" if done.lost else ""
        asyncio.run(
            audit.record(
                ADMIN,
                actor=actor,
                action="storage.repair",
                target=f"{f.kind} {where} {f.file}",
                outcome="repaired",
                source="cli",
                detail=f"{f.problem}; {done.action}{lost}",
            )
        )
        repaired.append({**_finding_dict(f), "action": done.action, "lost": done.lost})
        if not as_json:
            typer.echo(f"REPAIRED {f.kind} {where}: {done.action}{lost}")

    try:
        repair(data_dir, findings, record)
    finally:
        asyncio.run(audit.close())
    left = verify(data_dir, stream, partition, _held(segment_store))
    if as_json:
        damaged = [_finding_dict(f) for f in findings]
        still = [_finding_dict(f) for f in left]
        report(True, "", {"damaged": damaged, "repaired": repaired, "still_damaged": still})
    for finding in [] if as_json else left:
        typer.echo(f"STILL DAMAGED {finding.describe()} (run repair again)")
    raise typer.Exit(1 if left else 0)
