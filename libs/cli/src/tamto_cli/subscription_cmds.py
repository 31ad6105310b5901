"""`tamto sub list|overview|describe|peek|seek|skip|delete` and `tamto stream get`:
what a subscription is doing and how to steer it, at 3 a.m. (the tables and JSON
they print: `tamto_cli.subscription_views`).

Every command takes ``--json`` (one JSON document; `stream get` and `sub peek`
one JSON object a line, as `tamto sub` does). The verbs live in the group
``tamto subscription``; ``tamto sub VERB ...`` reaches them too (`VerbRouting`),
so ``tamto sub STREAM -s NAME`` still consumes. A stream named like a verb is
consumed with the options first: ``tamto sub -s NAME list``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from tamto_cli.connect import Gateway, fetch, reaches_gateway
from tamto_cli.extras import DeferringGroup
from tamto_cli.options import ApiKey, AsJson, DataDir, Format, Url
from tamto_cli.output import PayloadFormat, message_line, report
from tamto_cli.subscription_views import overview_json, print_info, print_overview

if TYPE_CHECKING:
    import tamto_sdk

err = Console(stderr=True, highlight=False)

subscription_app = typer.Typer(
    help="Look at and steer subscriptions: list, overview, describe, peek, seek, skip, delete."
)

#: The verbs `tamto sub VERB` routes to `tamto subscription VERB`.
VERBS = frozenset({"list", "describe", "seek", "skip", "delete", "peek", "overview"})


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


Partitions = Annotated[
    list[int] | None,
    typer.Option("--partition", "-p", help="only this partition (repeatable; default: all)"),
]


@subscription_app.command("list")
@reaches_gateway
def sub_list(gateway: Gateway, stream: str, as_json: AsJson = False) -> None:
    """The stream's subscriptions, one a line (a multicast consumer's own cursor is
    SUBSCRIPTION~CONSUMER)."""

    names = gateway.fetch(lambda client: client.subscriptions.list(stream))
    if as_json:
        print(json.dumps(names))
        return
    for name in names:
        typer.echo(name)


@subscription_app.command("describe")
@reaches_gateway
def sub_describe(gateway: Gateway, stream: str, subscription: str, as_json: AsJson = False) -> None:
    """Per partition: cursor, position, end, backlog (messages, ~bytes), unacked, age of
    the oldest unacked message, redeliveries, dead letters and consumers."""

    print_info(
        gateway.fetch(
            lambda client: client.subscriptions.describe(stream, subscription),
        ),
        as_json,
    )


DryRun = Annotated[
    bool, typer.Option("--dry-run", help="show each partition's cursor and where it would move")
]


@subscription_app.command("seek")
@reaches_gateway
def sub_seek(
    gateway: Gateway,
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
    since: Annotated[
        str | None,
        typer.Option(help="replay what was published in the last DURATION (10m, 90s, 2h, 1d)"),
    ] = None,
    shift_by: Annotated[
        int | None,
        typer.Option(help="move each cursor N offsets (back when negative), within the range"),
    ] = None,
    partitions: Partitions = None,
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> None:
    """Move the subscription's cursor: all partitions or none (each is validated
    first). Consumers attached are disconnected and read on from the new position
    when they reconnect (Pulsar's reset-cursor); what was acked past it is delivered
    again. --dry-run moves nothing and shows each cursor's old and new position."""
    given = [to is not None, bool(offsets), since is not None, shift_by is not None]
    if sum(given) != 1:
        err.print("tamto sub seek: give one of --to, --offset, --since or --shift-by")
        raise typer.Exit(2)
    if offsets and partitions:
        err.print("tamto sub seek: --offset names its partitions; leave out --partition")
        raise typer.Exit(2)
    target = _seek_target(to, offsets, since)

    def move(client: tamto_sdk.Client) -> Awaitable[tamto_sdk.subscriptions.SubscriptionInfo]:
        subscriptions = client.subscriptions
        if shift_by is not None:
            return subscriptions.shift(
                stream, subscription, shift_by, partitions=partitions, dry_run=dry_run
            )
        assert target is not None
        return subscriptions.seek(
            stream, subscription, target, partitions=partitions or None, dry_run=dry_run
        )

    print_info(gateway.fetch(move), as_json, dry_run=dry_run)


def _seek_target(
    to: str | None, offsets: list[str] | None, since: str | None
) -> tamto_sdk.StartPosition | dict[int, int] | timedelta | None:
    """What `tamto sub seek` was asked to move to (None: a shift); exit 2 on bad input."""
    if to is not None:
        return parse_position(to, "tamto sub seek: --to")
    if since is not None:
        try:
            return parse_duration(since)
        except ValueError as exc:
            err.print(f"tamto sub seek: --since {exc}")
            raise typer.Exit(2) from None
    if not offsets:
        return None
    target: dict[int, int] = {}
    for pair in offsets:
        partition, sep, offset = pair.partition("=")
        try:
            target[int(partition)] = int(offset)
        except ValueError:
            sep = ""
        if not sep:
            err.print(f"tamto sub seek: --offset is PARTITION=OFFSET, got {pair!r}")
            raise typer.Exit(2) from None
    return target


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``10m``, ``90s``, ``1.5h``, ``2d``, ``500ms`` as a timedelta; ValueError otherwise."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"must be a duration such as 10m, 90s, 2h or 1d, not {text!r}")
    return timedelta(seconds=float(found.group(1)) * _UNIT_S[found.group(2)])


@subscription_app.command("skip")
@reaches_gateway
def sub_skip(
    gateway: Gateway,
    stream: str,
    subscription: str,
    count: Annotated[int | None, typer.Option(help="acknowledge this many per partition")] = None,
    skip_all: Annotated[
        bool, typer.Option("--all", help="acknowledge everything: clear the backlog")
    ] = False,
    partitions: Partitions = None,
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> None:
    """Acknowledge the next --count messages on each partition, or --all of them.
    Nobody is disconnected. --dry-run acks nothing and shows where each cursor would go."""
    if (count is None) == (not skip_all):
        err.print("tamto sub skip: give --count N or --all (one of them)")
        raise typer.Exit(2)

    print_info(
        gateway.fetch(
            lambda client: client.subscriptions.skip(
                stream, subscription, count, partitions=partitions or None, dry_run=dry_run
            ),
        ),
        as_json,
        dry_run=dry_run,
    )


@subscription_app.command("delete")
@reaches_gateway
def sub_delete(gateway: Gateway, stream: str, subscription: str, as_json: AsJson = False) -> None:
    """Delete the subscription (its cursors); refused while consumers are attached
    (exit 8, FAILED_PRECONDITION, naming them)."""

    deleted = gateway.fetch(lambda client: client.subscriptions.delete(stream, subscription))
    fields = {"stream": stream, "subscription": subscription, "deleted": deleted}
    report(as_json, f"{stream}/{subscription}: deleted", fields)


@subscription_app.command("peek")
@reaches_gateway
def sub_peek(
    gateway: Gateway,
    stream: str,
    subscription: str,
    count: Annotated[int, typer.Option(help="messages per partition (at most 1000)")] = 1,
    partitions: Partitions = None,
    payload_format: Format = PayloadFormat.RAW,
    as_json: AsJson = False,
) -> None:
    """The next --count messages the subscription would get on each partition (not
    acked, from its cursor; in flight ones too), printed as `tamto sub` prints them.
    Nothing is delivered or acked."""

    for batch in gateway.fetch(
        lambda client: client.subscriptions.peek(
            stream, subscription, count, partitions=partitions or None
        ),
    ):
        for message in batch:
            print(message_line(message, payload_format, as_json), flush=True)


@subscription_app.command("overview")
@reaches_gateway
def sub_overview(
    gateway: Gateway,
    stream: Annotated[str | None, typer.Argument(help="one stream (default: every one)")] = None,
    as_json: AsJson = False,
) -> None:
    """One row per subscription of STREAM (or of every stream): type, partitions,
    backlog, unacked, publish rate into it, age of the oldest unacked message, dead
    letters and consumers."""

    rows = gateway.fetch(lambda client: client.subscriptions.overview(stream))
    if as_json:
        print(json.dumps(overview_json(rows)))
    else:
        print_overview(rows)


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

    for batch in fetch(
        url, api_key, data_dir, lambda client: client.streams.get(stream, partition, offset, count)
    ):
        for message in batch:
            print(message_line(message, payload_format, as_json), flush=True)
