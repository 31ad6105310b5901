"""`tamto sub list|describe|seek|skip|delete`, `tamto stream get` and the stats of
`tamto stream describe`: what a subscription is doing and how to steer it, at 3 a.m.

Every command that prints data takes ``--json`` (one JSON document; `stream get`
one JSON object a line, as `tamto sub` does). The verbs live in the group
``tamto subscription``; ``tamto sub VERB ...`` reaches them too (`VerbRouting`),
so ``tamto sub STREAM -s NAME`` still consumes. A stream named like a verb is
consumed with the options first: ``tamto sub -s NAME list``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tamto_cli.connect import connect_client
from tamto_cli.connect import run as run_command
from tamto_cli.extras import DeferringGroup
from tamto_cli.options import ApiKey, AsJson, DataDir, Format, Url
from tamto_cli.output import PayloadFormat, message_line

if TYPE_CHECKING:
    import tamto_sdk

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)

subscription_app = typer.Typer(
    help="Look at and steer subscriptions: list, describe, seek, skip, delete."
)

#: The verbs `tamto sub VERB` routes to `tamto subscription VERB`.
VERBS = frozenset({"list", "describe", "seek", "skip", "delete"})


class VerbRouting(DeferringGroup):
    """The top-level command group: ``sub VERB ...`` runs ``subscription VERB ...``
    (and it loads a deferred command when named: `DeferringGroup`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if len(args) >= 2 and args[0] == "sub" and args[1] in VERBS:
            args = ["subscription", *args[1:]]
        return super().parse_args(ctx, args)


def parse_position(text: str, what: str) -> tamto_sdk.StartPosition:
    """earliest, latest, offset:N or time:ISO (naive times are UTC); exit 2 otherwise."""
    import tamto_sdk

    kind, _, value = text.partition(":")
    try:
        if kind == "earliest" and not value:
            return tamto_sdk.Start.earliest()
        if kind == "latest" and not value:
            return tamto_sdk.Start.latest()
        if kind == "offset":
            return tamto_sdk.Start.offset(int(value))
        if kind == "time":
            when = datetime.fromisoformat(value)
            return tamto_sdk.Start.time(when if when.tzinfo else when.replace(tzinfo=UTC))
    except ValueError:
        pass
    err.print(f"{what} must be earliest, latest, offset:N or time:ISO, not {text!r}")
    raise typer.Exit(2)


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


def info_json(info: tamto_sdk.SubscriptionInfo) -> dict[str, Any]:
    """A described subscription as JSON, with its totals."""
    fields: dict[str, Any] = _jsonable(asdict(info))
    fields["type"] = info.type.value if info.type is not None else None
    fields["backlog_messages"] = info.backlog_messages
    fields["backlog_bytes"] = info.backlog_bytes
    fields["unacked"] = info.unacked
    return fields


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def print_info(info: tamto_sdk.SubscriptionInfo, as_json: bool) -> None:
    if as_json:
        print(json.dumps(info_json(info)))
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


Partitions = Annotated[
    list[int] | None,
    typer.Option("--partition", "-p", help="only this partition (repeatable; default: all)"),
]


@subscription_app.command("list")
def sub_list(
    stream: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """The stream's subscriptions, one a line (a multicast consumer's own cursor is
    SUBSCRIPTION~CONSUMER)."""

    async def run() -> list[str]:
        async with await connect_client(url, api_key, data_dir) as client:
            return await client.subscriptions.list(stream)

    names = run_command(run())
    if as_json:
        print(json.dumps(names))
        return
    for name in names:
        typer.echo(name)


@subscription_app.command("describe")
def sub_describe(
    stream: str,
    subscription: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Per partition: cursor, position, end, backlog (messages, ~bytes), unacked, age of
    the oldest unacked message, redeliveries, dead letters and consumers."""

    async def run() -> tamto_sdk.SubscriptionInfo:
        async with await connect_client(url, api_key, data_dir) as client:
            return await client.subscriptions.describe(stream, subscription)

    print_info(run_command(run()), as_json)


@subscription_app.command("seek")
def sub_seek(
    stream: str,
    subscription: str,
    to: Annotated[
        str | None,
        typer.Option(help="earliest, latest, offset:N (every partition) or time:ISO"),
    ] = None,
    offsets: Annotated[
        list[str] | None,
        typer.Option("--offset", help="PARTITION=OFFSET (repeatable), instead of --to"),
    ] = None,
    partitions: Partitions = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Move the subscription's cursor. Consumers attached are disconnected and read on
    from the new position when they reconnect (Pulsar's reset-cursor); what was acked
    past it is delivered again."""
    if (to is None) == (not offsets):
        err.print("tamto sub seek: give --to or --offset PARTITION=OFFSET (one of them)")
        raise typer.Exit(2)
    target: tamto_sdk.StartPosition | dict[int, int]
    if to is not None:
        target = parse_position(to, "tamto sub seek: --to")
    else:
        if partitions:
            err.print("tamto sub seek: --offset names its partitions; leave out --partition")
            raise typer.Exit(2)
        target = {}
        for pair in offsets or []:
            partition, sep, offset = pair.partition("=")
            try:
                target[int(partition)] = int(offset)
            except ValueError:
                sep = ""
            if not sep:
                err.print(f"tamto sub seek: --offset is PARTITION=OFFSET, got {pair!r}")
                raise typer.Exit(2) from None

    async def run() -> tamto_sdk.SubscriptionInfo:
        async with await connect_client(url, api_key, data_dir) as client:
            return await client.subscriptions.seek(
                stream, subscription, target, partitions=partitions or None
            )

    print_info(run_command(run()), as_json)


@subscription_app.command("skip")
def sub_skip(
    stream: str,
    subscription: str,
    count: Annotated[int | None, typer.Option(help="acknowledge this many per partition")] = None,
    skip_all: Annotated[
        bool, typer.Option("--all", help="acknowledge everything: clear the backlog")
    ] = False,
    partitions: Partitions = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Acknowledge the next --count messages on each partition, or --all of them.
    Nobody is disconnected."""
    if (count is None) == (not skip_all):
        err.print("tamto sub skip: give --count N or --all (one of them)")
        raise typer.Exit(2)

    async def run() -> tamto_sdk.SubscriptionInfo:
        async with await connect_client(url, api_key, data_dir) as client:
            return await client.subscriptions.skip(
                stream, subscription, count, partitions=partitions or None
            )

    print_info(run_command(run()), as_json)


@subscription_app.command("delete")
def sub_delete(
    stream: str,
    subscription: str,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Delete the subscription (its cursors); refused while consumers are attached."""

    async def run() -> bool:
        async with await connect_client(url, api_key, data_dir) as client:
            return await client.subscriptions.delete(stream, subscription)

    run_command(run())
    typer.echo(f"{stream}/{subscription}: deleted")


def stats_json(stats: tamto_sdk.StreamStats) -> list[dict[str, Any]]:
    return [{**asdict(p), "bytes_on_disk": p.bytes_on_disk} for p in stats.partitions]


def print_stats(stats: tamto_sdk.StreamStats) -> None:
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


def stream_get(
    stream: str,
    partition: Annotated[int, typer.Option("--partition", "-p", help="the partition")],
    offset: Annotated[int, typer.Option(help="the first offset")],
    count: Annotated[int, typer.Option(help="how many messages (at most 1000)")] = 1,
    payload_format: Format = PayloadFormat.RAW,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Read stored messages by offset without a subscription (peek): one
    `STREAM/PARTITION@OFFSET<TAB>KEY<TAB>PAYLOAD` line each, or with --json one JSON
    object a line, as `tamto sub` prints them."""

    async def run() -> list[tamto_sdk.MessageBatch]:
        async with await connect_client(url, api_key, data_dir) as client:
            return await client.streams.get(stream, partition, offset, count)

    for batch in run_command(run()):
        for message in batch:
            print(message_line(message, payload_format, as_json), flush=True)
