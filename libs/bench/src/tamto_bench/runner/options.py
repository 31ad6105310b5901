"""What shapes a benchmark run: the systems it may measure, the workloads' fixed
shapes, the options a user sets (`BenchOptions`) and how progress is told."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

SYSTEMS = ("tamto", "jetstream", "core", "ceiling", "ephemeral", "functions", "http")
#: Systems run only when named: MQTT (the gateway's broker beside mosquitto, `mqtt_bench`),
#: and freshness (ack to visible in the segment store and Iceberg, `runner.freshness`).
OPTIONAL_SYSTEMS = ("mqtt", "freshness")
#: The bodies the HTTP API's publish phases send (`http_jobs`), each a phase.
HTTP_BODIES = ("ndjson", "arrow")
#: The cluster beside the one node: not run unless asked for (`--systems` or `--nodes`).
CLUSTER_SYSTEMS = ("tamto-r3", "jetstream-r3")
#: The replication factor and ack quorum of "tamto-r3"'s streams (JetStream R3: 3 replicas).
CLUSTER_REPLICAS = 3
CLUSTER_QUORUM = 2
#: Ephemeral fan-out: this many consumers, over two subscriber workers.
FAN_OUT = 100
#: Requests in flight per requester worker (both systems).
REQUESTS_IN_FLIGHT = 16
#: The request/reply shapes the targets name, beside the one above: (row key,
#: requester workers, requests in flight each): one requester pipelining, one
#: request at a time, 200 concurrent requesters (in two workers).
REQUEST_SHAPES = (("rr_pipelined", 1, 64), ("rr_serial", 1, 1), ("rr_crowd", 2, 100))
MB = 1_000_000
#: Sizes of the sequential durable publish row and of the per-message
#: consuming row.
SEQUENTIAL_SIZES = (100, 1024)
PER_MESSAGE_SIZES = (100,)
#: Sizes the processing function rows run at (`tamto_bench.functions_jobs`).
FUNCTION_SIZES = (100,)


@dataclass(frozen=True)
class BenchOptions:
    """Everything that shapes a run; recorded in the JSON next to the numbers."""

    sizes: tuple[int, ...] = (100, 1024, 10240)
    duration_s: float = 5.0
    producers: int = 2
    consumers: int = 2
    partitions: int = 4
    rates: tuple[float, ...] = (1000.0, 5000.0)
    linger_ms: float = 0.0
    window: int = 10_000
    credits: int | None = None
    ceiling_inflight: int = 4
    drain_limit_s: float = 30.0
    idle_s: float = 1.0
    systems: tuple[str, ...] = SYSTEMS
    jetstream_sync: str = "always"
    quick: bool = False
    #: Storage nodes and routers of the local "tamto-r3" cluster.
    nodes: int = CLUSTER_REPLICAS
    #: Idle MQTT connections held at once for their memory ("mqtt"; 0: not measured).
    mqtt_idle: int = 10_000
    #: Storage's seal age on every Tamto the run starts (ms; 0: storage's default).
    seal_age_ms: int = 0
    #: The local Tamtos run each node's router and storage node as one process
    #: (`tamto up --colocate`).
    colocate: bool = False

    def storage_env(self) -> dict[str, str]:
        """The settings every Tamto the run starts gives its storage nodes
        (`--seal-age-ms`)."""
        return {"TAMTO_STORAGE_SEAL_AGE_MS": str(self.seal_age_ms)} if self.seal_age_ms else {}


class Progress(Protocol):
    """What the runner tells whoever shows its progress."""

    def start(self, total: int) -> None:
        """The run has `total` phases."""

    def phase(self, label: str) -> None:
        """A phase begins (the previous one, if any, is done)."""


#: One phase of a run: its label, and what runs it.
Phase = tuple[str, Callable[[], Awaitable[None]]]
