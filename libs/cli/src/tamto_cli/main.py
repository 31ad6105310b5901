"""The `tamto` command line."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

import tamto_sdk
from tamto_cli import settings
from tamto_cli.status import fetch_status, render_status
from tamto_cli.up import run_up
from tamto_common.errors import TamtoError
from tamto_local.cluster import ClusterConfig

app = typer.Typer(help="Tamto: durable streams, subscriptions and Parquet, in one system.")
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="where all state lives")]
Url = Annotated[str | None, typer.Option("--url", help="gateway URL (env TAMTO_URL)")]
ApiKey = Annotated[str | None, typer.Option("--api-key", help="API key (env TAMTO_API_KEY)")]


@app.command()
def up(
    data_dir: DataDir = None,
    gateway_port: Annotated[int, typer.Option(help="gateway port")] = 7400,
    etcd_port: Annotated[int, typer.Option(help="etcd client port (peer: +1)")] = 7379,
    nats_port: Annotated[int, typer.Option(help="NATS port")] = 7422,
    demo: Annotated[bool, typer.Option(help="publish and consume a demo stream")] = False,
    once: Annotated[bool, typer.Option(help="stop after starting (and the demo)")] = False,
    quiet: Annotated[bool, typer.Option(help="hide the services' logs")] = False,
) -> None:
    """Start etcd, NATS and every service locally; Ctrl-C stops them all."""
    for name, port in (
        ("--gateway-port", gateway_port),
        ("--etcd-port", etcd_port),
        ("--nats-port", nats_port),
    ):
        if not 1 <= port <= 65534:
            err.print(f"tamto up: invalid {name} {port}: must be 1-65534")
            raise typer.Exit(2)
    config = ClusterConfig(
        data_dir=settings.data_dir(data_dir),
        gateway_port=gateway_port,
        etcd_port=etcd_port,
        etcd_peer_port=etcd_port + 1,
        nats_port=nats_port,
    )
    raise typer.Exit(asyncio.run(run_up(config, console, demo=demo, once=once, quiet=quiet)))


@app.command()
def status(
    etcd: Annotated[str, typer.Option(help="etcd endpoint", envvar="TAMTO_ETCD_ENDPOINTS")] = (
        settings.DEFAULT_ETCD
    ),
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List the registered members with their health and version."""
    try:
        rows = asyncio.run(fetch_status(etcd))
    except TamtoError as exc:
        err.print(f"tamto status: {exc}")
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps([{**asdict(m), "health": h} for m, h in rows]))
    else:
        render_status(rows, console)


stream_app = typer.Typer(help="Create, inspect and list streams.")
app.add_typer(stream_app, name="stream")


@stream_app.command("ensure")
def stream_ensure(
    name: str,
    partitions: Annotated[int, typer.Option(help="partition count (fixed at creation)")] = 1,
    overwrite: Annotated[bool, typer.Option(help="apply a different config if it exists")] = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Create a stream if missing; report how an existing one differs."""

    async def run() -> None:
        async with await _connect(url, api_key, data_dir) as client:
            result = await client.streams.ensure(name, partitions=partitions, overwrite=overwrite)
            state = "created" if result.created else "exists"
            console.print(f"{name}: {state}, {result.stream.partitions} partitions")
            for difference in result.differences:
                console.print(f"  differs: {difference}")

    _run(run())


@stream_app.command("list")
def stream_list(url: Url = None, api_key: ApiKey = None, data_dir: DataDir = None) -> None:
    """List the streams."""

    async def run() -> None:
        async with await _connect(url, api_key, data_dir) as client:
            for info in await client.streams.list():
                typer.echo(f"{info.name}\t{info.partitions}\t{info.kind.value}")

    _run(run())


async def _connect(url: str | None, api_key: str | None, data_dir: Path | None) -> tamto_sdk.Client:
    creds = settings.api_key(api_key, settings.data_dir(data_dir))
    return await tamto_sdk.connect(settings.gateway_url(url), api_key=creds)


@app.command()
def pub(
    stream: str,
    messages: Annotated[
        list[str] | None, typer.Argument(help="payloads (default: stdin lines)")
    ] = None,
    key: Annotated[str | None, typer.Option(help="message key")] = None,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Publish messages durably; prints partition and offset of each."""
    payloads = messages or [line.rstrip("\n") for line in sys.stdin]
    key_bytes = key.encode() if key is not None else None

    async def run() -> None:
        async with await _connect(url, api_key, data_dir) as client:
            async with client.producer(stream) as producer:
                futures = [await producer.send(p.encode(), key=key_bytes) for p in payloads]
                for payload, future in zip(payloads, futures, strict=True):
                    r = await future
                    typer.echo(f"{r.stream}/{r.partition}@{r.offset}\t{payload}")

    _run(run())


@app.command()
def sub(
    stream: str,
    subscription: Annotated[str, typer.Option("--subscription", "-s", help="subscription name")],
    count: Annotated[int, typer.Option(help="stop after this many messages (0: never)")] = 0,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Consume messages through a subscription, acking each one after printing it."""

    async def run() -> None:
        async with await _connect(url, api_key, data_dir) as client:
            async with client.consumer(stream, subscription) as consumer:
                seen = 0
                async for message in consumer:
                    key = message.key.decode(errors="replace") if message.key else ""
                    text = message.payload.decode(errors="replace")
                    typer.echo(f"{stream}/{message.partition}@{message.offset}\t{key}\t{text}")
                    consumer.ack(message)
                    seen += 1
                    if count and seen >= count:
                        return

    _run(run())


def _run(coro: object) -> None:
    try:
        asyncio.run(coro)  # type: ignore[arg-type]
    except tamto_sdk.TamtoError as exc:
        err.print(f"tamto: {exc}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
