"""`tamto stream`: create, inspect, list and delete streams (`get` peeks at messages,
from `subscription_cmds`)."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from tamto_cli.connect import Gateway, reaches_gateway
from tamto_cli.options import AsJson
from tamto_cli.subscription_cmds import stream_get
from tamto_cli.subscription_views import print_stats, stats_json
from tamto_common.streams import DEFAULT_ACK_TIMEOUT_MS, DEFAULT_DEDUP_WINDOW_MS

if TYPE_CHECKING:
    import tamto_sdk

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)
E = TypeVar("E", bound=enum.Enum)

stream_app = typer.Typer(help="Create, inspect, list and delete streams; peek at messages.")
stream_app.command("get")(stream_get)

_ZERO_MEANS = {
    "retention_ms": "forever",
    "retention_bytes": "unbounded",
    "max_deliveries": "never",
    "max_lag": "never",
}

# `tamto stream ensure`'s options, one alias each (the command's signature stays readable).
Partitions = Annotated[int, typer.Option(help="partition count (fixed at creation)")]
RetentionMs = Annotated[int, typer.Option(help="keep messages this long (0: forever)")]
RetentionBytes = Annotated[int, typer.Option(help="bytes kept per partition (0: unbounded)")]
RetentionPolicyOption = Annotated[
    str,
    typer.Option(
        help="limits (only the limits remove messages) or interest (also what every "
        "subscription has acked)"
    ),
]
DedupWindowMs = Annotated[int, typer.Option(help="how long message ids are remembered")]
AckTimeoutMs = Annotated[int, typer.Option(help="redeliver what stays unacked this long")]
MaxDeliveries = Annotated[
    int, typer.Option(help="dead-letter after this many deliveries (0: never)")
]
MaxLag = Annotated[
    int, typer.Option(help="dead-letter unacked messages this far behind (0: never)")
]
DeadLetterStream = Annotated[str, typer.Option(help="where dead letters go (default: NAME.dlq)")]
DurabilityOption = Annotated[str, typer.Option(help="group (fsync per group commit) or interval")]
FsyncIntervalMs = Annotated[
    int, typer.Option(help="with --durability interval: ms between fsyncs (0: default)")
]
ReplicationFactor = Annotated[
    int, typer.Option(help="R: storage nodes holding every message (0: min(3, nodes))")
]
AckQuorum = Annotated[
    int, typer.Option(help="Q: replicas fsynced before an ack (0: a majority of R)")
]
Overwrite = Annotated[bool, typer.Option(help="apply a different config if it exists")]
Kind = Annotated[
    str, typer.Option(help="persistent, or ephemeral (at-most-once, topics; never stored)")
]
BufferMessages = Annotated[
    int, typer.Option(help="ephemeral: messages held per slow consumer (0: default)")
]
OverflowOption = Annotated[
    str, typer.Option(help="ephemeral: what a full buffer drops, drop_oldest or drop_newest")
]
RequestTimeoutMs = Annotated[
    int, typer.Option(help="ephemeral: a request's default wait for its reply (0: default)")
]


def _info_dict(info: tamto_sdk.stream_config.StreamInfo) -> dict[str, object]:
    settings_ = info.ephemeral if info.ephemeral is not None else info.config
    config = {
        name: value.value if isinstance(value, enum.Enum) else value
        for name, value in asdict(settings_).items()
    }
    return {"name": info.name, "partitions": info.partitions, "kind": info.kind.value, **config}


def _choice(kind: type[E], value: str, flag: str, allowed: str) -> E:
    """`value` as a member of `kind`; bad usage (exit 2) naming `flag` otherwise."""
    try:
        return kind(value)
    except ValueError:
        err.print(f"tamto: {flag} must be {allowed}, got {value!r}")
        raise typer.Exit(2) from None


@stream_app.command("ensure")
@reaches_gateway
def stream_ensure(
    gateway: Gateway,
    name: str,
    partitions: Partitions = 1,
    retention_ms: RetentionMs = 0,
    retention_bytes: RetentionBytes = 0,
    retention_policy: RetentionPolicyOption = "limits",
    dedup_window_ms: DedupWindowMs = DEFAULT_DEDUP_WINDOW_MS,
    ack_timeout_ms: AckTimeoutMs = DEFAULT_ACK_TIMEOUT_MS,
    max_deliveries: MaxDeliveries = 0,
    max_lag: MaxLag = 0,
    dead_letter_stream: DeadLetterStream = "",
    durability: DurabilityOption = "group",
    fsync_interval_ms: FsyncIntervalMs = 0,
    replication_factor: ReplicationFactor = 0,
    ack_quorum: AckQuorum = 0,
    overwrite: Overwrite = False,
    kind: Kind = "persistent",
    buffer_messages: BufferMessages = 0,
    overflow: OverflowOption = "drop_oldest",
    request_timeout_ms: RequestTimeoutMs = 0,
    as_json: AsJson = False,
) -> None:
    """Create a stream if missing; report how an existing one differs (--overwrite applies it).

    Prints `NAME: created|exists|changed, N partitions`, then one `differs: ...`
    (or `changed: ...`) line per setting.
    """
    import tamto_sdk

    mode = _choice(
        tamto_sdk.stream_config.Durability, durability, "--durability", "'group' or 'interval'"
    )
    policy = _choice(
        tamto_sdk.stream_config.RetentionPolicy,
        retention_policy,
        "--retention-policy",
        "'limits' or 'interest'",
    )
    if kind not in ("persistent", "ephemeral"):
        err.print(f"tamto: --kind must be 'persistent' or 'ephemeral', got {kind!r}")
        raise typer.Exit(2)
    dropping = _choice(
        tamto_sdk.stream_config.Overflow, overflow, "--overflow", "'drop_oldest' or 'drop_newest'"
    )
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
    result = gateway.fetch(
        lambda client: client.streams.ensure(
            name, partitions=partitions, config=config, overwrite=overwrite
        ),
    )
    _print_ensured(name, result, overwrite, as_json)


def _print_ensured(
    name: str, result: tamto_sdk.stream_config.EnsureResult, overwrite: bool, as_json: bool
) -> None:
    applied = overwrite and bool(result.differences)
    if as_json:
        fields = {
            "created": result.created,
            "changed": applied,
            "differences": result.differences,
            "stream": _info_dict(result.stream),
        }
        print(json.dumps(fields))
        return
    state = "created" if result.created else "changed" if applied else "exists"
    typer.echo(f"{name}: {state}, {result.stream.partitions} partitions")
    for difference in result.differences:
        typer.echo(f"  {'changed' if applied else 'differs'}: {difference}")


@stream_app.command("describe")
@reaches_gateway
def stream_describe(gateway: Gateway, name: str, as_json: AsJson = False) -> None:
    """Show a stream's settings and, per partition, its first and end offsets,
    messages, bytes on disk (WAL and segments), publish rate and owning router."""

    async def read(
        client: tamto_sdk.Client,
    ) -> tuple[tamto_sdk.stream_config.StreamInfo, tamto_sdk.subscriptions.StreamStats | None]:
        info = await client.streams.describe(name)
        stats = None if info.ephemeral is not None else await client.streams.stats(name)
        return info, stats

    info, stats = gateway.fetch(read)
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


@stream_app.command("list")
@reaches_gateway
def stream_list(gateway: Gateway, as_json: AsJson = False) -> None:
    """List the streams: one `NAME<TAB>PARTITIONS<TAB>KIND` line each (or JSON)."""
    streams = gateway.fetch(lambda client: client.streams.list())
    if as_json:
        print(json.dumps([_info_dict(info) for info in streams]))
        return
    for info in streams:
        typer.echo(f"{info.name}\t{info.partitions}\t{info.kind.value}")


@stream_app.command("delete")
@reaches_gateway
def stream_delete(gateway: Gateway, name: str, as_json: AsJson = False) -> None:
    """Delete a stream and its data; exits 4 (NOT_FOUND) if there is no such stream."""
    gateway.delete("stream", name, lambda client: client.streams.delete(name), as_json)
