"""`tamto pub` and `tamto sub`: publish messages and consume them, on persistent
streams (through a subscription) or ephemeral ones (`ephemeral_cmds`)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from tamto_cli import ephemeral_cmds
from tamto_cli.connect import Gateway, reaches_gateway
from tamto_cli.options import AsJson, Format
from tamto_cli.output import PayloadFormat, message_line, parse_headers
from tamto_cli.subscription_cmds import parse_position

if TYPE_CHECKING:
    import tamto_sdk

err = Console(stderr=True, highlight=False)


@reaches_gateway
def pub(
    gateway: Gateway,
    stream: str,
    messages: Annotated[
        list[str] | None, typer.Argument(help="payloads (default: stdin lines)")
    ] = None,
    key: Annotated[str | None, typer.Option(help="message key")] = None,
    topic: Annotated[
        str | None, typer.Option(help="to an ephemeral stream, under this topic (a.b.c)")
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", "-H", help="a header KEY=VALUE on every message (repeatable)"),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Publish messages durably; prints partition and offset of each (--json: one JSON
    object a line). With --topic, to an ephemeral stream (at most once; prints how
    many were published)."""
    try:
        headers = parse_headers(header)
    except ValueError as exc:
        err.print(f"tamto pub: --header: {exc}")
        raise typer.Exit(2) from None
    if headers and topic is not None:
        err.print("tamto pub: --header is for persistent streams (not with --topic)")
        raise typer.Exit(2)
    payloads = messages or [line.rstrip("\n") for line in sys.stdin]
    key_bytes = key.encode() if key is not None else None

    async def publish(client: tamto_sdk.Client) -> None:
        if topic is not None:
            await ephemeral_cmds.publish(
                client, stream, payloads, topic, key_bytes, as_json=as_json
            )
            return
        async with client.producer(stream) as producer:
            futures = [
                await producer.send(p.encode(), key=key_bytes, headers=headers) for p in payloads
            ]
            for payload, future in zip(payloads, futures, strict=True):
                r = await future
                if as_json:
                    where = {"stream": r.stream, "partition": r.partition, "offset": r.offset}
                    print(json.dumps({**where, "payload": payload}, ensure_ascii=False))
                else:
                    typer.echo(f"{r.stream}/{r.partition}@{r.offset}\t{payload}")

    gateway.fetch(publish)


@reaches_gateway
def sub(
    gateway: Gateway,
    stream: str,
    subscription: Annotated[
        str | None,
        typer.Option("--subscription", "-s", help="subscription name (persistent streams)"),
    ] = None,
    match: Annotated[
        str | None, typer.Option(help="ephemeral: topic pattern, * one word, # any (default: #)")
    ] = None,
    group: Annotated[
        str, typer.Option(help="ephemeral: share the messages with this group's members")
    ] = "",
    count: Annotated[int, typer.Option(help="stop after this many messages (0: never)")] = 0,
    sub_type: Annotated[
        str, typer.Option("--type", help="exclusive, failover, shared, key-shared, multicast")
    ] = "exclusive",
    start: Annotated[
        str,
        typer.Option(help="where a new subscription starts: earliest, latest, offset:N, time:ISO"),
    ] = "earliest",
    consumer_name: Annotated[
        str | None, typer.Option(help="this consumer's name (multicast: its own cursor)")
    ] = None,
    payload_format: Format = PayloadFormat.RAW,
    as_json: AsJson = False,
) -> None:
    """Consume messages through a subscription, acking each one after printing it
    (`STREAM/PARTITION@OFFSET<TAB>KEY<TAB>PAYLOAD`, or with --json one JSON object a
    line with headers, id, publish_time and delivery_count too).
    Without --subscription, receive from an ephemeral stream (--match, --group),
    printing `STREAM[TOPIC]<TAB>KEY<TAB>PAYLOAD` lines.
    Administration: tamto sub list|overview|describe|peek|seek|skip|delete
    (tamto subscription --help)."""
    if subscription is not None and (match is not None or group):
        err.print("tamto sub: --match and --group are for ephemeral streams (no --subscription)")
        raise typer.Exit(2)
    if subscription is None and payload_format is not PayloadFormat.RAW:
        err.print("tamto sub: --format is for subscriptions (--subscription)")
        raise typer.Exit(2)
    kind = _subscription_type(sub_type)
    position = _start_position(start)

    async def consume(client: tamto_sdk.Client) -> None:
        if subscription is None:
            await ephemeral_cmds.subscribe(client, stream, match, group, count, as_json)
            return
        async with client.consumer(
            stream,
            subscription,
            subscription_type=kind,
            start=position,
            consumer_name=consumer_name,
        ) as consumer:
            seen = 0
            async for message in consumer:
                print(message_line(message, payload_format, as_json), flush=True)
                consumer.ack(message)
                seen += 1
                if count and seen >= count:
                    return

    gateway.fetch(consume)


def _subscription_type(text: str) -> tamto_sdk.SubscriptionType:
    import tamto_sdk

    try:
        return tamto_sdk.SubscriptionType[text.upper().replace("-", "_")]
    except KeyError:
        err.print(
            "tamto sub: --type must be exclusive, failover, shared, key-shared or multicast, "
            f"not {text!r}"
        )
        raise typer.Exit(2) from None


def _start_position(text: str) -> tamto_sdk.StartPosition:
    return parse_position(text, "tamto sub: --start")
