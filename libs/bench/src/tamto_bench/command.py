"""The `tamto bench` command: options, progress bar, summary, JSON file."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from tamto_bench.harness import BenchSetupError, TamtoTarget
from tamto_bench.pool import BenchError
from tamto_bench.report import finish, markdown, render
from tamto_bench.runner import (
    CLUSTER_REPLICAS,
    CLUSTER_SYSTEMS,
    OPTIONAL_SYSTEMS,
    SYSTEMS,
    BenchOptions,
    run_bench,
)
from tamto_cli import settings
from tamto_common.durable import write_atomic

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class _Bar:
    """Shows the runner's phases as a rich progress bar (on stderr)."""

    def __init__(self, progress: RichProgress) -> None:
        self._progress = progress
        self._task: Any = None

    def start(self, total: int) -> None:
        self._task = self._progress.add_task("starting", total=total)

    def phase(self, label: str) -> None:
        if self._task is None:
            return
        task = self._progress.tasks[self._task]
        if task.description != "starting":
            self._progress.advance(self._task)
        self._progress.update(self._task, description=label)


def _progress(console: Console = err) -> RichProgress:
    """The bar a run draws (transient, on stderr): phase label, bar, phases done of all, time."""
    columns = (
        TextColumn("{task.description:<36}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    return RichProgress(*columns, console=console, transient=True)


def _numbers(text: str, what: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or any(v <= 0 or math.isnan(v) for v in values):
        err.print(f"tamto bench: {what} must be positive numbers separated by commas: {text!r}")
        raise typer.Exit(2)
    return values


def _clean(value: Any) -> Any:
    """JSON has no NaN: missing measurements become null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


#: --systems's default: every one-node system.
_ALL_SYSTEMS = ",".join(SYSTEMS)

#: `tamto bench`'s options, one alias each (the command's signature stays readable).
Local = Annotated[
    bool, typer.Option(help="start a whole Tamto in a temporary directory for the run")
]
Quick = Annotated[bool, typer.Option(help="short windows and one latency rate (a CI-sized check)")]
Sizes = Annotated[str, typer.Option(help="message sizes in bytes")]
Duration = Annotated[
    float | None, typer.Option(help="seconds per measurement window (5; 1 with --quick)")
]
Producers = Annotated[int, typer.Option(help="producer processes")]
Consumers = Annotated[int, typer.Option(help="consumer processes")]
Partitions = Annotated[int, typer.Option(help="partitions of each Tamto stream")]
Rates = Annotated[
    str | None,
    typer.Option(help="fixed rates (msg/s) for latency (1000,5000; 5000 with --quick)"),
]
LingerMs = Annotated[
    float, typer.Option(help="Tamto producer linger (0: batches clocked by the round trip)")
]
Window = Annotated[int, typer.Option(help="unacknowledged publishes per producer (both systems)")]
Systems = Annotated[
    str,
    typer.Option(
        help="what to run, of: tamto,jetstream,core,ceiling,ephemeral,functions,http "
        "(publishing through the gateway's HTTP API), the cluster's tamto-r3,jetstream-r3, "
        "and, only when named, mqtt (the gateway's MQTT broker beside Debian's mosquitto) "
        "and freshness (ack to visible in the segment store and its Iceberg table)"
    ),
]
Nodes = Annotated[
    int | None,
    typer.Option(
        help="storage nodes and routers of the tamto-r3 cluster (3); more than 1 also "
        "adds tamto-r3,jetstream-r3 to --systems"
    ),
]
SealAgeMs = Annotated[
    int,
    typer.Option(
        help="storage's seal age (ms) on every Tamto the run starts (0: storage's default): "
        "the freshness rows' subject; a phase starts once the last one's data is sealed"
    ),
]
JetstreamSync = Annotated[
    str, typer.Option(help="JetStream sync_interval (always: fsync before every ack)")
]
Colocate = Annotated[
    bool,
    typer.Option(
        help="with --local: each node's router and storage node as one process "
        "(tamto up --colocate)"
    ),
]
JsonPath = Annotated[
    Path | None, typer.Option("--json", help="write the results as JSON to this file")
]
MarkdownPath = Annotated[
    Path | None, typer.Option("--markdown", help="write the tables as Markdown to this file")
]
Url = Annotated[str | None, typer.Option(help="gateway URL (env TAMTO_URL)")]
ApiKey = Annotated[str | None, typer.Option(help="API key (env TAMTO_API_KEY)")]
Etcd = Annotated[
    str, typer.Option(help="etcd endpoint (service memory)", envvar="TAMTO_ETCD_ENDPOINTS")
]
DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="where the running system's state lives")
]


def bench(
    local: Local = False,
    quick: Quick = False,
    sizes: Sizes = "100,1024,10240",
    duration: Duration = None,
    producers: Producers = 2,
    consumers: Consumers = 2,
    partitions: Partitions = 4,
    rates: Rates = None,
    linger_ms: LingerMs = 0.0,
    window: Window = 10_000,
    systems: Systems = _ALL_SYSTEMS,
    nodes: Nodes = None,
    jetstream_sync: JetstreamSync = "always",
    seal_age_ms: SealAgeMs = 0,
    colocate: Colocate = False,
    json_path: JsonPath = None,
    markdown_path: MarkdownPath = None,
    url: Url = None,
    api_key: ApiKey = None,
    etcd: Etcd = settings.DEFAULT_ETCD,
    data_dir: DataDir = None,
) -> None:
    """Measure throughput, latency and memory of Tamto beside NATS JetStream, and its
    ephemeral streams beside core NATS (loopback only)."""
    chosen = _chosen_systems(systems, nodes, local)
    if min(producers, consumers, partitions, window) <= 0:
        err.print("tamto bench: --producers, --consumers, --partitions and --window must be > 0")
        raise typer.Exit(2)
    options = BenchOptions(
        sizes=tuple(int(v) for v in _numbers(sizes, "--sizes")),
        duration_s=duration if duration is not None else (1.0 if quick else 5.0),
        producers=producers,
        consumers=consumers,
        partitions=partitions,
        rates=_numbers(rates, "--rates") if rates else ((5000.0,) if quick else (1000.0, 5000.0)),
        linger_ms=linger_ms,
        window=window,
        drain_limit_s=10.0 if quick else 30.0,
        idle_s=0.5 if quick else 1.0,
        systems=chosen,
        jetstream_sync=jetstream_sync,
        quick=quick,
        nodes=nodes or CLUSTER_REPLICAS,
        mqtt_idle=1_000 if quick else 10_000,
        seal_age_ms=seal_age_ms,
        colocate=colocate,
    )
    _check_options(options, local)
    target = None
    if not local and ("tamto" in chosen or "ephemeral" in chosen):
        data = settings.data_dir(data_dir)
        target = TamtoTarget(settings.gateway_url(url), settings.api_key(api_key, data), etcd)

    try:
        with _progress() as progress:
            doc = asyncio.run(run_bench(options, _Bar(progress), local=local, target=target))
    except (BenchError, BenchSetupError) as exc:
        err.print(f"tamto bench: {exc}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    _show(_clean(finish(doc)), json_path, markdown_path)


def _chosen_systems(systems: str, nodes: int | None, local: bool) -> tuple[str, ...]:
    """The systems --systems (and --nodes) choose; bad usage (exit 2) if unknown, or if
    the cluster cannot run as asked."""
    chosen = tuple(s.strip() for s in systems.split(",") if s.strip())
    known = (*SYSTEMS, *CLUSTER_SYSTEMS, *OPTIONAL_SYSTEMS)
    unknown = [s for s in chosen if s not in known]
    if unknown or not chosen:
        err.print(f"tamto bench: --systems takes {','.join(known)}, not {systems!r}")
        raise typer.Exit(2)
    if nodes is not None and nodes > 1:
        chosen += tuple(s for s in CLUSTER_SYSTEMS if s not in chosen)
    if "tamto-r3" in chosen and (nodes or CLUSTER_REPLICAS) < CLUSTER_REPLICAS:
        err.print(f"tamto bench: tamto-r3 needs --nodes {CLUSTER_REPLICAS} or more, not {nodes}")
        raise typer.Exit(2)
    if "tamto-r3" in chosen and not local:
        err.print("tamto bench: tamto-r3 starts its own cluster: add --local")
        raise typer.Exit(2)
    return chosen


def _check_options(options: BenchOptions, local: bool) -> None:
    """Bad usage (exit 2) for what the options allow only together."""
    if "mqtt" in options.systems and not local:
        err.print("tamto bench: mqtt starts its own Tamto and mosquitto: add --local")
        raise typer.Exit(2)
    if "freshness" in options.systems and not local:
        err.print("tamto bench: freshness starts its own Tamtos with a segment store: add --local")
        raise typer.Exit(2)
    if options.seal_age_ms < 0:
        err.print("tamto bench: --seal-age-ms must be 0 (storage's default) or more")
        raise typer.Exit(2)
    if options.duration_s <= 0 or min(options.sizes) < 8:
        err.print("tamto bench: --duration must be > 0 and every size at least 8 bytes")
        raise typer.Exit(2)


def _show(doc: dict[str, Any], json_path: Path | None, markdown_path: Path | None) -> None:
    """Print the tables; write the JSON and Markdown files asked for."""
    render(doc, console)
    if json_path is not None:
        write_atomic(json_path, (json.dumps(doc, indent=2) + "\n").encode())
        console.print(f"results: {json_path}")
    if markdown_path is not None:
        write_atomic(markdown_path, markdown(doc).encode())
