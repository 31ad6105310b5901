"""How the subscription verbs print what they find: tables for people, JSON for
scripts (`tamto sub describe|seek|skip|overview`, and the stats of `tamto stream
describe`)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    import tamto_sdk
    import tamto_sdk.subscriptions

#: Piped, a table keeps its full width (names are never cut short); a terminal's
#: width applies on a terminal.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 250)


def _jsonable(value: Any) -> Any:
    import tamto_sdk

    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tamto_sdk.SubscriptionType):
        return value.value
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def info_json(info: tamto_sdk.subscriptions.SubscriptionInfo) -> dict[str, Any]:
    """A described subscription as JSON, with its totals."""
    fields: dict[str, Any] = _jsonable(asdict(info))
    fields["type"] = info.type.value if info.type is not None else None
    fields["backlog_messages"] = info.backlog_messages
    fields["backlog_bytes"] = info.backlog_bytes
    fields["unacked"] = info.unacked
    fields["dead_lettered"] = info.dead_lettered
    return fields


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def print_info(
    info: tamto_sdk.subscriptions.SubscriptionInfo, as_json: bool, dry_run: bool = False
) -> None:
    if as_json:
        print(json.dumps({**info_json(info), "dry_run": dry_run} if dry_run else info_json(info)))
        return
    if dry_run:
        print_plan(info)
        return
    kind = info.type.value if info.type is not None else "no consumers"
    table = Table(
        title=f"subscription {info.subscription} on {info.stream} ({kind}): "
        f"backlog {info.backlog_messages} messages, ~{info.backlog_bytes} bytes",
        header_style="bold",
    )
    for column in (
        "partition",
        "cursor",
        "position",
        "end",
        "backlog",
        "bytes",
        "unacked",
        "oldest unacked",
        "redelivered",
        "dead letters",
        "consumers",
    ):
        table.add_column(column, justify="left" if column == "consumers" else "right")
    for p in info.partitions:
        consumers = ", ".join(
            f"{c.name or '?'} (credit {c.credits}, unacked {c.unacked})" for c in p.consumers
        )
        table.add_row(
            str(p.partition),
            str(p.ack_floor),
            str(p.position),
            str(p.end_offset),
            str(p.backlog_messages),
            str(p.backlog_bytes),
            str(p.unacked),
            _age(p.oldest_unacked_age_s),
            str(p.redeliveries),
            str(p.dead_lettered),
            consumers or "-",
        )
    console.print(table)


def stats_json(stats: tamto_sdk.subscriptions.StreamStats) -> list[dict[str, Any]]:
    return [{**asdict(p), "bytes_on_disk": p.bytes_on_disk} for p in stats.partitions]


def print_stats(stats: tamto_sdk.subscriptions.StreamStats) -> None:
    table = Table(
        title=f"{stats.messages} messages, {stats.bytes_on_disk} bytes on disk, "
        f"{stats.publish_rate:.1f} msg/s over the last minute",
        header_style="bold",
    )
    for column in ("partition", "first", "end", "messages", "wal bytes", "segment bytes"):
        table.add_column(column, justify="right")
    table.add_column("msg/s", justify="right")
    table.add_column("owner")
    for p in stats.partitions:
        table.add_row(
            str(p.partition),
            str(p.start_offset),
            str(p.end_offset),
            str(p.messages),
            str(p.wal_bytes),
            str(p.segment_bytes),
            f"{p.publish_rate:.1f}",
            p.owner,
        )
    console.print(table)


def print_plan(info: tamto_sdk.subscriptions.SubscriptionInfo) -> None:
    """A seek's dry run: each partition's cursor now and where it would move."""
    table = Table(
        title=f"dry run: subscription {info.subscription} on {info.stream} (nothing moved)",
        header_style="bold",
    )
    for column in ("partition", "cursor", "new cursor", "change", "end", "backlog after"):
        table.add_column(column, justify="right")
    for p in info.partitions:
        to = p.ack_floor if p.seek_to is None else p.seek_to
        table.add_row(
            str(p.partition),
            str(p.ack_floor),
            str(to),
            f"{to - p.ack_floor:+d}",
            str(p.end_offset),
            str(max(0, p.end_offset - to)),
        )
    console.print(table)


def overview_json(rows: list[tamto_sdk.subscriptions.SubscriptionSummary]) -> list[dict[str, Any]]:
    return [
        {**_jsonable(asdict(r)), "type": r.type.value if r.type is not None else None} for r in rows
    ]


def print_overview(rows: list[tamto_sdk.subscriptions.SubscriptionSummary]) -> None:
    """One row per subscription (`tamto sub overview`)."""
    table = Table(header_style="bold")
    for column in ("stream", "subscription", "type"):
        table.add_column(column)
    for column in ("partitions", "backlog", "unacked", "in msg/s", "oldest unacked"):
        table.add_column(column, justify="right")
    table.add_column("dead letters", justify="right")
    table.add_column("consumers")
    for r in rows:
        table.add_row(
            r.stream,
            r.subscription,
            r.type.value if r.type is not None else "-",
            str(r.partitions),
            str(r.backlog_messages),
            str(r.unacked),
            f"{r.publish_rate:.1f}",
            _age(r.oldest_unacked_age_s),
            str(r.dead_lettered),
            ", ".join(name or "?" for name in r.consumers) or "-",
        )
    console.print(table)
