"""The `tamto` command line.

Every `tamto` call imports this module and builds the whole command tree, so it
imports only what defining the commands needs (typer, rich, the light `tamto_cli`
modules). The SDK (pyarrow, numpy), the server packages and the status
probes are imported inside the command that uses them, and `tamto bench` and
`tamto chaos` are loaded only when they run (`extras.add_server_command`):
`tamto --help` or `tamto stream --help` load none of them
(libs/cli/tests/test_cli_imports.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from tamto_cli import ephemeral_cmds, settings
from tamto_cli.auth_cmds import auth_app
from tamto_cli.cluster_cmds import node_app, partition_app
from tamto_cli.connect import connect_client, exit_code, fetch
from tamto_cli.connect import run as run_command
from tamto_cli.contexts import context_app
from tamto_cli.extras import add_server_command, server_extra
from tamto_cli.function_cmds import function_app
from tamto_cli.options import ApiKey, AsJson, DataDir, Format, LeaseTtl, Url
from tamto_cli.output import PayloadFormat, message_line, parse_headers, report
from tamto_cli.storage_cmds import storage_app
from tamto_cli.subscription_cmds import VerbRouting, parse_position, stream_get, subscription_app
from tamto_cli.subscription_views import print_stats, stats_json
from tamto_common.streams import DEFAULT_ACK_TIMEOUT_MS, DEFAULT_DEDUP_WINDOW_MS

if TYPE_CHECKING:
    import tamto_sdk
    import tamto_sdk.stream_config

app = typer.Typer(
    cls=VerbRouting, help="Tamto: durable streams, subscriptions and Parquet, in one system."
)
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


@app.command()
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
) -> None:
    """Start etcd, NATS and every service locally; Ctrl-C stops them all."""
    from tamto_common.config import discovery_check, resolver_check

    with server_extra("tamto up"):
        from tamto_cli.up import run_up
        from tamto_local.cluster import MAX_NODES, ClusterConfig
    if not 1 <= nodes <= MAX_NODES:
        err.print(f"tamto up: invalid --nodes {nodes}: must be 1-{MAX_NODES}")
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
    )
    shown = err if as_json else console
    code = asyncio.run(run_up(config, shown, demo=demo, once=once, quiet=quiet, as_json=as_json))
    raise typer.Exit(code)


@app.command()
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


@app.command()
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


@app.command("scrape-targets")
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


app.add_typer(auth_app, name="auth")
app.add_typer(storage_app, name="storage")
app.add_typer(context_app, name="context")
app.add_typer(subscription_app, name="subscription")
app.add_typer(partition_app, name="partition")
app.add_typer(node_app, name="node")
app.add_typer(function_app, name="function")
add_server_command(
    app,
    "bench",
    "tamto_bench",
    "bench",
    "Measure throughput, latency and memory of Tamto beside NATS JetStream, and its\n"
    "ephemeral streams beside core NATS (loopback only).",
)
app.command("request")(ephemeral_cmds.request)
add_server_command(
    app,
    "chaos",
    "tamto_cli.chaos",
    "chaos",
    "Run a local system and hit random processes with faults while clients publish and\n"
    "consume; report lost, duplicated, stalls beyond downtime and recovery per fault.",
)

stream_app = typer.Typer(help="Create, inspect, list and delete streams; peek at messages.")
app.add_typer(stream_app, name="stream")
stream_app.command("get")(stream_get)

_ZERO_MEANS = {
    "retention_ms": "forever",
    "retention_bytes": "unbounded",
    "max_deliveries": "never",
    "max_lag": "never",
}


def _info_dict(info: tamto_sdk.stream_config.StreamInfo) -> dict[str, object]:
    settings_ = info.ephemeral if info.ephemeral is not None else info.config
    config = {
        name: value.value if isinstance(value, enum.Enum) else value
        for name, value in asdict(settings_).items()
    }
    return {"name": info.name, "partitions": info.partitions, "kind": info.kind.value, **config}


@stream_app.command("ensure")
def stream_ensure(
    name: str,
    partitions: Annotated[int, typer.Option(help="partition count (fixed at creation)")] = 1,
    retention_ms: Annotated[int, typer.Option(help="keep messages this long (0: forever)")] = 0,
    retention_bytes: Annotated[
        int, typer.Option(help="bytes kept per partition (0: unbounded)")
    ] = 0,
    retention_policy: Annotated[
        str,
        typer.Option(
            help="limits (only the limits remove messages) or interest (also what every "
            "subscription has acked)"
        ),
    ] = "limits",
    dedup_window_ms: Annotated[
        int, typer.Option(help="how long message ids are remembered")
    ] = DEFAULT_DEDUP_WINDOW_MS,
    ack_timeout_ms: Annotated[
        int, typer.Option(help="redeliver what stays unacked this long")
    ] = DEFAULT_ACK_TIMEOUT_MS,
    max_deliveries: Annotated[
        int, typer.Option(help="dead-letter after this many deliveries (0: never)")
    ] = 0,
    max_lag: Annotated[
        int, typer.Option(help="dead-letter unacked messages this far behind (0: never)")
    ] = 0,
    dead_letter_stream: Annotated[
        str, typer.Option(help="where dead letters go (default: NAME.dlq)")
    ] = "",
    durability: Annotated[
        str, typer.Option(help="group (fsync per group commit) or interval")
    ] = "group",
    fsync_interval_ms: Annotated[
        int, typer.Option(help="with --durability interval: ms between fsyncs (0: default)")
    ] = 0,
    replication_factor: Annotated[
        int, typer.Option(help="R: storage nodes holding every message (0: min(3, nodes))")
    ] = 0,
    ack_quorum: Annotated[
        int, typer.Option(help="Q: replicas fsynced before an ack (0: a majority of R)")
    ] = 0,
    overwrite: Annotated[bool, typer.Option(help="apply a different config if it exists")] = False,
    kind: Annotated[
        str, typer.Option(help="persistent, or ephemeral (at-most-once, topics; never stored)")
    ] = "persistent",
    buffer_messages: Annotated[
        int, typer.Option(help="ephemeral: messages held per slow consumer (0: default)")
    ] = 0,
    overflow: Annotated[
        str, typer.Option(help="ephemeral: what a full buffer drops, drop_oldest or drop_newest")
    ] = "drop_oldest",
    request_timeout_ms: Annotated[
        int, typer.Option(help="ephemeral: a request's default wait for its reply (0: default)")
    ] = 0,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Create a stream if missing; report how an existing one differs (--overwrite applies it).

    Prints `NAME: created|exists|changed, N partitions`, then one `differs: ...`
    (or `changed: ...`) line per setting.
    """
    import tamto_sdk

    try:
        mode = tamto_sdk.stream_config.Durability(durability)
    except ValueError:
        err.print(f"tamto: --durability must be 'group' or 'interval', got {durability!r}")
        raise typer.Exit(2) from None
    try:
        policy = tamto_sdk.stream_config.RetentionPolicy(retention_policy)
    except ValueError:
        err.print(
            f"tamto: --retention-policy must be 'limits' or 'interest', got {retention_policy!r}"
        )
        raise typer.Exit(2) from None
    if kind not in ("persistent", "ephemeral"):
        err.print(f"tamto: --kind must be 'persistent' or 'ephemeral', got {kind!r}")
        raise typer.Exit(2)
    try:
        dropping = tamto_sdk.stream_config.Overflow(overflow)
    except ValueError:
        err.print(f"tamto: --overflow must be 'drop_oldest' or 'drop_newest', got {overflow!r}")
        raise typer.Exit(2) from None
    config: tamto_sdk.StreamConfig | tamto_sdk.EphemeralConfig = tamto_sdk.StreamConfig(
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
        retention_policy=policy,
        dedup_window_ms=dedup_window_ms,
        ack_timeout_ms=ack_timeout_ms,
        max_deliveries=max_deliveries,
        max_lag=max_lag,
        dead_letter_stream=dead_letter_stream,
        durability=mode,
        fsync_interval_ms=fsync_interval_ms,
        replication_factor=replication_factor,
        ack_quorum=ack_quorum,
    )
    if kind == "ephemeral":
        config = tamto_sdk.EphemeralConfig(buffer_messages, dropping, request_timeout_ms)

    async def run() -> None:
        async with await connect_client(url, api_key, data_dir) as client:
            result = await client.streams.ensure(
                name, partitions=partitions, config=config, overwrite=overwrite
            )
        applied = overwrite and bool(result.differences)
        if as_json:
            print(
                json.dumps(
                    {
                        "created": result.created,
                        "changed": applied,
                        "differences": result.differences,
                        "stream": _info_dict(result.stream),
                    }
                )
            )
            return
        state = "created" if result.created else "changed" if applied else "exists"
        typer.echo(f"{name}: {state}, {result.stream.partitions} partitions")
        for difference in result.differences:
            typer.echo(f"  {'changed' if applied else 'differs'}: {difference}")

    run_command(run())


@stream_app.command("describe")
def stream_describe(
    name: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Show a stream's settings and, per partition, its first and end offsets,
    messages, bytes on disk (WAL and segments), publish rate and owning router."""

    async def run() -> None:
        async with await connect_client(url, api_key, data_dir) as client:
            info = await client.streams.describe(name)
            stats = None if info.ephemeral is not None else await client.streams.stats(name)
        fields = _info_dict(info)
        if as_json:
            print(json.dumps({**fields, "stats": stats_json(stats) if stats else []}))
            return
        table = Table(title=f"stream {info.name}", show_header=True, header_style="bold")
        table.add_column("setting")
        table.add_column("value", justify="right")
        for field, value in fields.items():
            if field == "name":
                continue
            shown = str(value)
            if value == 0 and field in _ZERO_MEANS:
                shown = f"0 ({_ZERO_MEANS[field]})"
            table.add_row(field, shown)
        console.print(table)
        if stats is not None:
            print_stats(stats)

    run_command(run())


@stream_app.command("list")
def stream_list(
    as_json: AsJson = False, url: Url = None, api_key: ApiKey = None, data_dir: DataDir = None
) -> None:
    """List the streams: one `NAME<TAB>PARTITIONS<TAB>KIND` line each (or JSON)."""
    streams = fetch(url, api_key, data_dir, lambda client: client.streams.list())
    if as_json:
        print(json.dumps([_info_dict(info) for info in streams]))
        return
    for info in streams:
        typer.echo(f"{info.name}\t{info.partitions}\t{info.kind.value}")


@stream_app.command("delete")
def stream_delete(
    name: str,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Delete a stream and its data; exits 4 (NOT_FOUND) if there is no such stream."""

    async def run() -> bool:
        async with await connect_client(url, api_key, data_dir) as client:
            return await client.streams.delete(name)

    if not run_command(run()):
        err.print(f"tamto: stream {name!r} does not exist")
        raise typer.Exit(exit_code("NOT_FOUND"))
    report(as_json, f"{name}: deleted", {"name": name, "deleted": True})


@app.command()
def pub(
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
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
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

    async def run() -> None:
        async with await connect_client(url, api_key, data_dir) as client:
            if topic is not None:
                await ephemeral_cmds.publish(
                    client, stream, payloads, topic, key_bytes, as_json=as_json
                )
                return
            async with client.producer(stream) as producer:
                futures = [
                    await producer.send(p.encode(), key=key_bytes, headers=headers)
                    for p in payloads
                ]
                for payload, future in zip(payloads, futures, strict=True):
                    r = await future
                    if as_json:
                        where = {"stream": r.stream, "partition": r.partition, "offset": r.offset}
                        print(json.dumps({**where, "payload": payload}, ensure_ascii=False))
                    else:
                        typer.echo(f"{r.stream}/{r.partition}@{r.offset}\t{payload}")

    run_command(run())


@app.command()
def sub(
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
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
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

    async def run() -> None:
        async with await connect_client(url, api_key, data_dir) as client:
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

    run_command(run())


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
