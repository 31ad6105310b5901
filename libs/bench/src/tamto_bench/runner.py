"""The benchmark plan: which phases run, in what order, and what each one records.

Besides the one-node systems (`SYSTEMS`) a run may measure the cluster
(`CLUSTER_SYSTEMS`): "tamto-r3", a local Tamto of `--nodes` storage nodes and
routers with two gateways and streams of replication factor 3 and ack quorum 2,
and "jetstream-r3", three clustered nats-servers with streams of 3 replicas.
Their workers are the same as the one-node systems' ("tamto" and "jetstream"
jobs); their results are recorded under "tamto_r3" and "jetstream_r3".
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import platform
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import nats
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

import tamto_sdk
from tamto_bench import mqtt_bench
from tamto_bench.ceiling import BATCH_MESSAGES
from tamto_bench.harness import (
    HOST,
    JETSTREAM_CLUSTER_CONFIG,
    JETSTREAM_CLUSTER_SERVERS,
    JETSTREAM_CONFIG,
    RssSampler,
    TamtoTarget,
    jetstream_cluster,
    jetstream_server,
    local_tamto,
    metrics_urls,
    rpc_totals,
    service_pids,
    unsealed_bytes,
)
from tamto_bench.nats_jobs import push_consumer_config, subject_of
from tamto_bench.pool import BenchError, WorkerPool
from tamto_bench.spec import JobResult, JobSpec
from tamto_common.config import MIB
from tamto_local.ports import free_port
from tamto_protocol.partitioning import partition_for_key

SYSTEMS = ("tamto", "jetstream", "core", "ceiling", "ephemeral", "functions", "http")
#: Systems run only when named: MQTT (the gateway's broker beside mosquitto, `mqtt_bench`).
OPTIONAL_SYSTEMS = ("mqtt",)
#: The bodies the HTTP API's publish phases send (`http_jobs`), each a phase.
HTTP_BODIES = ("ndjson", "arrow")
#: The cluster beside the one node: not run unless asked for (`--systems` or `--nodes`).
CLUSTER_SYSTEMS = ("tamto-r3", "jetstream-r3")
#: The worker jobs (spec.system) each benchmarked system runs.
_WORKER_SYSTEM = {"tamto-r3": "tamto", "jetstream-r3": "jetstream"}
#: The replication factor and ack quorum of "tamto-r3"'s streams (JetStream R3: 3 replicas).
CLUSTER_REPLICAS = 3
CLUSTER_QUORUM = 2
#: The router's append call, timed by its RPC histogram (the replication round trip).
ROUTER_APPEND = "/tamto.v1.Router/Append"
#: The calls on a durable publish's way to disk, each timed by its service's RPC
#: histogram; the latency phase reports their mean server times (`hops_ms`). A direct
#: publish (the SDK's default path) is the router's Publish, and no gateway call.
LATENCY_HOPS = (
    ("gateway", "gateway_publish", "/tamto.v1.Gateway/Publish"),
    ("router", "router_append", ROUTER_APPEND),
    ("router", "router_publish", "/tamto.v1.Router/Publish"),
    ("storage", "storage_append", "/tamto.v1.Storage/Append"),
)
#: Ephemeral fan-out: this many consumers, over two subscriber workers.
FAN_OUT = 100
#: Requests in flight per requester worker (both systems).
REQUESTS_IN_FLIGHT = 16
#: The request/reply shapes of the issue's targets, beside the one above: (row key,
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
#: Publishes all JetStream producers may have unacknowledged together (see `_publish`).
_JETSTREAM_MAX_QUEUED = 8_000

#: Extra time a phase may take beyond its window before it counts as hung.
_PHASE_SLACK_S = 90.0


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


class Progress(Protocol):
    """What the runner tells whoever shows its progress."""

    def start(self, total: int) -> None:
        """The run has `total` phases."""

    def phase(self, label: str) -> None:
        """A phase begins (the previous one, if any, is done)."""


Phase = tuple[str, Callable[[], Awaitable[None]]]


def percentile(sorted_values: Sequence[int], q: float) -> float:
    """The nearest-rank percentile `q` (0-100) of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[rank - 1])


def latency_summary(results: list[JobResult], rate: float) -> dict[str, Any]:
    """p50/p99/p99.9 (ms) of every consumer's samples, and how many there were."""
    samples = sorted(ns for r in results for ns in r.latencies_ns)
    summary: dict[str, Any] = {
        "rate_msgs_s": rate,
        "samples": len(samples),
        "p50_ms": percentile(samples, 50) / 1e6,
        "p99_ms": percentile(samples, 99) / 1e6,
        "p999_ms": percentile(samples, 99.9) / 1e6,
        "max_ms": (samples[-1] / 1e6) if samples else math.nan,
    }
    return summary


HopTotals = dict[str, tuple[float, int]]


async def hop_totals(pages: dict[str, list[str]]) -> HopTotals:
    """Seconds in, and number of, each `LATENCY_HOPS` call so far (none without pages)."""
    if not pages:
        return {}
    return {
        name: await rpc_totals(pages.get(service, []), method)
        for service, name, method in LATENCY_HOPS
    }


def publish_side(
    publishers: list[JobResult], before: HopTotals, after: HopTotals
) -> dict[str, Any]:
    """Where a latency phase's publish→deliver time goes on the publish side: the
    publishers' publish→durable-ack p50/p99 (Tamto's workers time them), each hop's mean
    server time over the phase (`LATENCY_HOPS`, the calls made) and the messages per
    storage Append call (batching: a message waits for the batch in flight before it)."""
    out: dict[str, Any] = {}
    samples = sorted(ns for r in publishers for ns in r.latencies_ns)
    if samples:
        out["publish_ack_p50_ms"] = percentile(samples, 50) / 1e6
        out["publish_ack_p99_ms"] = percentile(samples, 99) / 1e6
    hops: dict[str, float] = {}
    for name, (seconds, calls) in after.items():
        made = calls - before.get(name, (0.0, 0))[1]
        if made > 0:
            hops[name] = (seconds - before.get(name, (0.0, 0))[0]) / made * 1e3
    if hops:
        out["hops_ms"] = hops
    appends = after.get("storage_append", (0.0, 0))[1] - before.get("storage_append", (0.0, 0))[1]
    if appends > 0:
        out["messages_per_storage_append"] = sum(r.total for r in publishers) / appends
    return out


def result_key(system: str) -> str:
    """Where a system's results go in the JSON ("core" → "core_nats", "tamto-r3" →
    "tamto_r3")."""
    return "core_nats" if system == "core" else system.replace("-", "_")


def drain_rate(results: list[JobResult]) -> tuple[int, float]:
    """Messages consumed by all consumers, and the rate from the common start to the last."""
    total = sum(r.total for r in results)
    if not total:
        return 0, 0.0
    started = min(r.started for r in results)
    last = max(r.last for r in results if r.total)
    return total, total / max(last - started, 1e-6)


@dataclass
class Runner:
    """Builds and runs the phases of one benchmark run."""

    options: BenchOptions
    pool: WorkerPool
    workdir: Path
    tamto: TamtoTarget | None = None
    nats_url: str | None = None
    #: The cluster: a Tamto of several nodes, three clustered nats-servers.
    tamto_r3: TamtoTarget | None = None
    nats_r3_url: str | None = None
    #: Debian's mosquitto beside the gateway's MQTT broker ("mqtt").
    mosquitto: mqtt_bench.Broker | None = None
    #: The pids of the Tamto's services, by name ("gateway", ...).
    service_pids: dict[str, int] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    _tamto_admin: tamto_sdk.Client | None = None
    _tamto_r3_admin: tamto_sdk.Client | None = None
    _nats_admin: Any = None
    _nats_r3_admin: Any = None
    #: Each cluster system's client targets, taken in turn by its workers (clients
    #: spread over the gateways, and over the nats-servers).
    _turns: dict[str, Iterator[str]] = field(default_factory=dict)
    #: Each Tamto's routers' metrics pages, by system ("tamto", "tamto-r3").
    router_metrics: dict[str, list[str]] = field(default_factory=dict)
    #: Each Tamto's metrics pages by service ("gateway", "router", "storage"), by system.
    service_metrics: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    _run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    def phases(self) -> list[Phase]:
        """Every phase, size by size: Tamto, JetStream, core NATS, then the ceiling."""
        o = self.options
        plan: list[Phase] = []
        for size in o.sizes:
            self.results[str(size)] = {}
            if "tamto" in o.systems:
                plan.append((f"tamto publish {size} B", self._bind(self._tamto_publish, size)))
                plan += self._everyday_phases("tamto", size)
                plan.append((f"tamto consume+ack {size} B", self._bind(self._tamto_drain, size)))
                if "ceiling" in o.systems or "http" in o.systems:
                    plan.append(
                        (
                            f"tamto publish {size} B (send_batch)",
                            self._bind(self._tamto_publish_batches, size),
                        )
                    )
                for rate in o.rates:
                    plan.append(
                        (
                            f"tamto latency {size} B @ {rate:g}/s",
                            self._bind(self._latency, "tamto", size, rate),
                        )
                    )
            if "http" in o.systems and self.tamto is not None and self.tamto.http_url:
                if "tamto" not in o.systems:  # else it ran above: the SDK beside HTTP
                    plan.append(
                        (
                            f"tamto publish {size} B (send_batch)",
                            self._bind(self._tamto_publish_batches, size),
                        )
                    )
                plan += [
                    (
                        f"tamto publish {size} B over HTTP ({body})",
                        self._bind(self._http, size, body),
                    )
                    for body in HTTP_BODIES
                ]
            if "mqtt" in o.systems and self.mosquitto is not None and self._tamto_mqtt:
                plan.append((f"mqtt {size} B beside mosquitto", self._bind(self._mqtt, size)))
                if size == o.sizes[0] and o.mqtt_idle:
                    plan.append((f"mqtt {o.mqtt_idle} idle connections", self._mqtt_idle))
            if "jetstream" in o.systems:
                plan.append((f"jetstream publish {size} B", self._bind(self._js_publish, size)))
                plan += self._everyday_phases("jetstream", size)
                plan.append((f"jetstream consume+ack {size} B", self._bind(self._js_drain, size)))
                for rate in o.rates:
                    plan.append(
                        (
                            f"jetstream latency {size} B @ {rate:g}/s",
                            self._bind(self._latency, "jetstream", size, rate),
                        )
                    )
            for system in CLUSTER_SYSTEMS:
                if system in o.systems:
                    plan += self._durable_phases(system, size)
            if "core" in o.systems:
                plan.append((f"core NATS pub/sub {size} B", self._bind(self._core_pubsub, size)))
                for rate in o.rates:
                    plan.append(
                        (
                            f"core NATS latency {size} B @ {rate:g}/s",
                            self._bind(self._latency, "core", size, rate),
                        )
                    )
            if "ceiling" in o.systems:
                plan.append((f"bare ceiling {size} B", self._bind(self._ceiling, size)))
            if "ephemeral" in o.systems:
                plan += self._ephemeral_phases(size, first=size == o.sizes[0])
            if "functions" in o.systems and size in FUNCTION_SIZES:
                plan.append((f"functions {size} B", self._bind(self._functions, size)))
        return plan

    def _durable_phases(self, system: str, size: int) -> list[Phase]:
        """A cluster system's durable workloads, as the one-node systems run them: publish,
        the everyday calls, consume+ack, latency at every rate."""
        plan: list[Phase] = [
            (f"{system} publish {size} B", self._bind(self._publish, system, size))
        ]
        plan += self._everyday_phases(system, size)
        plan.append((f"{system} consume+ack {size} B", self._bind(self._drain, system, size)))
        for rate in self.options.rates:
            plan.append(
                (
                    f"{system} latency {size} B @ {rate:g}/s",
                    self._bind(self._latency, system, size, rate),
                )
            )
        return plan

    def _everyday_phases(self, system: str, size: int) -> list[Phase]:
        """The everyday calls: sequential durable publish at `SEQUENTIAL_SIZES`,
        per-message consuming (of the publish phase's backlog) at `PER_MESSAGE_SIZES`."""
        plan: list[Phase] = []
        if size in PER_MESSAGE_SIZES:
            plan.append(
                (
                    f"{system} per-message consume {size} B",
                    self._bind(self._per_message, system, size),
                )
            )
        if size in SEQUENTIAL_SIZES:
            plan.append(
                (
                    f"{system} sequential publish {size} B",
                    self._bind(self._sequential, system, size),
                )
            )
        return plan

    def _ephemeral_phases(self, size: int, first: bool) -> list[Phase]:
        """Ephemeral pub/sub and latency per size; fan-out and request/reply once (at the
        first size), each beside core NATS when the run has it."""
        o = self.options
        plan: list[Phase] = [
            (f"ephemeral pub/sub {size} B", self._bind(self._eph_pubsub, size)),
            *(
                (
                    f"ephemeral latency {size} B @ {rate:g}/s",
                    self._bind(self._latency, "ephemeral", size, rate),
                )
                for rate in o.rates
            ),
        ]
        if first:
            for system in ("ephemeral", "core"):
                if system == "core" and "core" not in o.systems:
                    continue
                label = "ephemeral" if system == "ephemeral" else "core NATS"
                plan.append(
                    (
                        f"{label} fan-out x{FAN_OUT} {size} B",
                        self._bind(self._fan_out, system, size),
                    )
                )
                plan.append(
                    (
                        f"{label} request/reply {size} B",
                        self._bind(self._request_reply, system, size),
                    )
                )
                plan += [
                    (
                        f"{label} request/reply {key} {size} B",
                        self._bind(self._request_reply, system, size, key, workers, window),
                    )
                    for key, workers, window in REQUEST_SHAPES
                ]
                plan.append(
                    (
                        f"{label} one at a time {size} B",
                        self._bind(self._one_at_a_time, system, size),
                    )
                )
        return plan

    @staticmethod
    def _bind(fn: Callable[..., Awaitable[None]], *args: Any) -> Callable[[], Awaitable[None]]:
        return lambda: fn(*args)

    def _record(self, size: int, system: str, values: dict[str, Any]) -> None:
        self.results[str(size)].setdefault(result_key(system), {}).update(values)

    def _target(self, system: str) -> str:
        """Where a worker of `system` connects; a cluster's workers take its gateways
        (or servers) in turn."""
        if system in CLUSTER_SYSTEMS:
            if system not in self._turns:
                if system == "tamto-r3":
                    assert self.tamto_r3 is not None
                    urls: Sequence[str] = self.tamto_r3.gateway_urls
                else:
                    assert self.nats_r3_url is not None
                    urls = self.nats_r3_url.split(",")
                self._turns[system] = itertools.cycle(urls)
            return next(self._turns[system])
        if system in ("tamto", "ephemeral") and self.tamto is not None:
            return self.tamto.url
        return self.nats_url or ""

    def _spec(self, system: str, role: str, stream: str, size: int, **kw: Any) -> JobSpec:
        o = self.options
        target = kw.pop("target", None)
        if target is None:
            target = self._target(system)
        tamto = self.tamto_r3 if system == "tamto-r3" else self.tamto
        return JobSpec(
            system=_WORKER_SYSTEM.get(system, system),
            role=role,
            target=target,
            stream=stream,
            size=size,
            duration_s=kw.pop("duration_s", o.duration_s),
            api_key=tamto.api_key if tamto else "",
            linger_ms=o.linger_ms,
            window=kw.pop("window", o.window),
            credits=o.credits,
            idle_s=o.idle_s,
            **kw,
        )

    async def _run(self, what: str, specs: list[JobSpec], window_s: float) -> list[JobResult]:
        return await self.pool.run(specs, what, timeout_s=window_s + _PHASE_SLACK_S)

    def _stream(self, kind: str, size: int, rate: float = 0) -> str:
        suffix = f"-{int(rate)}" if rate else ""
        return f"bench-{self._run_id}-{kind}-{size}{suffix}"

    # -- admin ---------------------------------------------------------------

    async def _create(self, system: str, stream: str, push: bool = False) -> None:
        if system == "tamto":
            assert self._tamto_admin is not None
            await self._tamto_admin.streams.ensure(stream, partitions=self.options.partitions)
            await self._warm_up(self._tamto_admin, stream)
        elif system == "tamto-r3":
            assert self._tamto_r3_admin is not None
            config = tamto_sdk.StreamConfig(
                replication_factor=CLUSTER_REPLICAS, ack_quorum=CLUSTER_QUORUM
            )
            await self._tamto_r3_admin.streams.ensure(
                stream, partitions=self.options.partitions, config=config
            )
            await self._warm_up(self._tamto_r3_admin, stream)
        elif system == "ephemeral":
            assert self._tamto_admin is not None
            await self._tamto_admin.streams.ensure(stream, kind=tamto_sdk.StreamKind.EPHEMERAL)
        elif system in ("jetstream", "jetstream-r3"):
            r3 = system == "jetstream-r3"
            js = (self._nats_r3_admin if r3 else self._nats_admin).jetstream()
            await js.add_stream(
                StreamConfig(
                    name=stream,
                    subjects=[subject_of(stream)],
                    storage=StorageType.FILE,
                    num_replicas=JETSTREAM_CLUSTER_SERVERS if r3 else 1,
                    retention=RetentionPolicy.LIMITS,
                )
            )
            if push:
                await js.add_consumer(stream, push_consumer_config(stream))

    async def _warm_up(self, admin: tamto_sdk.Client, stream: str) -> None:
        """Publish one message to every partition before a window opens.

        The first publish to a partition waits for the router to take ownership
        of it (about a second here); that is a one-off, not throughput. The
        payloads are zero bytes, so latency consumers (which skip stamps from
        before their window) ignore them.
        """
        n = self.options.partitions
        keys: dict[int, bytes] = {}
        i = 0
        while len(keys) < n:
            key = f"warm-{i}".encode()
            keys.setdefault(partition_for_key(key, n), key)
            i += 1
        async with admin.producer(stream, linger_ms=0) as producer:
            futures = [await producer.send(bytes(8), key=key) for key in keys.values()]
            await asyncio.gather(*futures)

    async def _delete(self, system: str, stream: str) -> None:
        with contextlib.suppress(Exception):  # cleanup only: a leftover stream is harmless
            if system in ("tamto", "ephemeral") and self._tamto_admin is not None:
                await self._tamto_admin.streams.delete(stream)
            elif system == "tamto-r3" and self._tamto_r3_admin is not None:
                await self._tamto_r3_admin.streams.delete(stream)
            elif system == "jetstream":
                await self._nats_admin.jetstream().delete_stream(stream)
            elif system == "jetstream-r3":
                await self._nats_r3_admin.jetstream().delete_stream(stream)

    async def open_admin(self) -> None:
        """Connect the parent's admin clients (streams are created and deleted here)."""
        if self.tamto is not None:
            self._tamto_admin = await tamto_sdk.connect(self.tamto.url, api_key=self.tamto.api_key)
        if self.nats_url is not None:
            self._nats_admin = await nats.connect(self.nats_url, max_reconnect_attempts=0)
        if self.tamto_r3 is not None:
            self._tamto_r3_admin = await tamto_sdk.connect(
                self.tamto_r3.url, api_key=self.tamto_r3.api_key
            )
        if self.nats_r3_url is not None:
            self._nats_r3_admin = await nats.connect(
                self.nats_r3_url.split(","), max_reconnect_attempts=0
            )

    async def close_admin(self) -> None:
        """Close the admin clients."""
        for tamto in (self._tamto_admin, self._tamto_r3_admin):
            if tamto is not None:
                await tamto.close()
        for nc in (self._nats_admin, self._nats_r3_admin):
            if nc is not None:
                await nc.close()

    # -- workloads -----------------------------------------------------------

    async def _publish(self, system: str, size: int) -> None:
        o = self.options
        stream = self._stream("tp", size)
        await self._create(system, stream)
        window = o.window
        if system in ("jetstream", "jetstream-r3"):
            # nats-server answers 429 "too many requests" once a stream has about
            # 10,000 publishes queued, and nats-py then never resolves that publish's
            # future. Keep the producers' windows together below that; it is still
            # seconds of JetStream's durable throughput, so it costs it nothing.
            window = min(window, _JETSTREAM_MAX_QUEUED // o.producers)
        specs = [self._spec(system, "pub", stream, size, window=window) for _ in range(o.producers)]
        results = await self._run(f"{system} publish", specs, o.duration_s)
        # Everything acknowledged, over the window plus the time the in-flight tail
        # took to drain: a deep window that only fills during the run is not counted
        # as if it were throughput, nor is it lost.
        total, rate = drain_rate(results)
        self._record(
            size,
            system,
            {
                "publish_msgs_s": rate,
                "publish_mb_s": rate * size / MB,
                "published": total,
                "publish_acked_in_window_msgs_s": sum(r.in_window for r in results) / o.duration_s,
                "publish_errors": sum(r.errors for r in results),
            },
        )

    async def _drain(self, system: str, size: int) -> None:
        o = self.options
        stream = self._stream("tp", size)
        specs = [
            self._spec(system, "sub", stream, size, duration_s=o.drain_limit_s)
            for _ in range(o.consumers)
        ]
        try:
            results = await self._run(f"{system} consume", specs, o.drain_limit_s)
        finally:
            await self._delete(system, stream)
        total, rate = drain_rate(results)
        self._record(
            size,
            system,
            {"consume_msgs_s": rate, "consume_mb_s": rate * size / MB, "consumed": total},
        )

    async def _functions(self, size: int) -> None:
        assert self._tamto_admin is not None
        from tamto_bench.functions_jobs import function_rows

        prefix = f"bench-{self._run_id}-fn"
        values = await function_rows(
            self._tamto_admin, prefix, size, self.options.partitions, self.options.quick
        )
        self._record(size, "functions", values)

    async def _tamto_publish(self, size: int) -> None:
        await self._publish("tamto", size)

    async def _tamto_publish_batches(self, size: int) -> None:
        """Publish with `send_batch` of `BATCH_MESSAGES` messages per call: the client
        hands over batches, as the ceiling's client does, so the two compare the
        broker path alone (the per-message `send` path is what JetStream is compared to)."""
        o = self.options
        stream = self._stream("tpb", size)
        await self._create("tamto", stream)
        specs = [
            self._spec("tamto", "pub", stream, size, batch_api=BATCH_MESSAGES)
            for _ in range(o.producers)
        ]
        try:
            results = await self._run("tamto publish (send_batch)", specs, o.duration_s)
        finally:
            await self._delete("tamto", stream)
        _total, rate = drain_rate(results)
        self._record(
            size, "tamto", {"publish_batch_msgs_s": rate, "publish_batch_mb_s": rate * size / MB}
        )

    async def _http(self, size: int, body: str) -> None:
        """Publish batches of `BATCH_MESSAGES` through the gateway's HTTP API, each
        request one `body` ("ndjson" or "arrow"): beside `send_batch`'s phase."""
        o = self.options
        assert self.tamto is not None
        stream = self._stream(f"http-{body}", size)
        await self._create("tamto", stream)
        specs = [
            self._spec("http", "pub", stream, size, target=self.tamto.http_url, body=body)
            for _ in range(o.producers)
        ]
        try:
            results = await self._run(f"tamto publish over HTTP ({body})", specs, o.duration_s)
        finally:
            await self._delete("tamto", stream)
        if any(r.errors for r in results):
            raise BenchError(f"HTTP publish ({body}): {sum(r.errors for r in results)} refused")
        _total, rate = drain_rate(results)
        self._record(
            size, "tamto", {f"http_{body}_msgs_s": rate, f"http_{body}_mb_s": rate * size / MB}
        )

    @property
    def _tamto_mqtt(self) -> bool:
        return self.tamto is not None and self.tamto.mqtt_port > 0

    def _mqtt_brokers(self) -> list[mqtt_bench.Broker]:
        assert self.tamto is not None
        assert self.mosquitto is not None
        gateway = self.service_pids.get("gateway", 0)
        tamto = mqtt_bench.Broker("tamto", self.tamto.mqtt_port, self.tamto.api_key, gateway)
        return [tamto, self.mosquitto]

    async def _mqtt(self, size: int) -> None:
        """QoS 0 and 1 throughput, latency and fan-out through the gateway's MQTT broker
        and mosquitto, with the same client (`mqtt_bench`)."""
        stream = self._stream("mqtt", size)
        await self._create("tamto", stream)
        try:
            for broker in self._mqtt_brokers():
                values = await mqtt_bench.measure(broker, stream, size, self.options.duration_s)
                self._record(size, broker.name, values)
        finally:
            await self._delete("tamto", stream)

    async def _mqtt_idle(self) -> None:
        """Memory per idle connection, `mqtt_idle` of them held at once, on each broker."""
        size = self.options.sizes[0]
        for broker in self._mqtt_brokers():
            per = await mqtt_bench.idle_memory(broker, self.options.mqtt_idle)
            self._record(size, broker.name, {"mqtt_idle_bytes_per_connection": per})

    async def _tamto_drain(self, size: int) -> None:
        await self._drain("tamto", size)

    async def _js_publish(self, size: int) -> None:
        await self._publish("jetstream", size)

    async def _js_drain(self, size: int) -> None:
        await self._drain("jetstream", size)

    async def _latency(self, system: str, size: int, rate: float) -> None:
        o = self.options
        stream = self._stream("lat", size, rate)
        await self._create(system, stream, push=True)
        subs = [
            self._spec(system, "sub", stream, size, latency=True, group="bench")
            for _ in range(o.consumers)
        ]
        pubs = [
            self._spec(system, "pub", stream, size, rate=rate / o.producers)
            for _ in range(o.producers)
        ]
        pages = self.service_metrics.get(system, {})
        try:
            before = await hop_totals(pages)
            results = await self._run(f"{system} latency", subs + pubs, o.duration_s + o.idle_s)
            after = await hop_totals(pages)
        finally:
            await self._delete(system, stream)
        summary = latency_summary(results[: len(subs)], rate)
        sent = sum(r.total for r in results[len(subs) :])
        summary["delivered"] = sum(r.total for r in results[: len(subs)])
        summary["sent"] = sent
        summary.update(publish_side(results[len(subs) :], before, after))
        # Fewer deliveries than sends by the end: the system could not keep up with
        # the rate, so the percentiles measure a growing queue, not latency.
        summary["saturated"] = summary["delivered"] < 0.95 * sent
        self._record(size, system, {f"latency_{rate:g}": summary})

    async def _core_pubsub(self, size: int) -> None:
        o = self.options
        stream = self._stream("core", size)
        subs = [self._spec("core", "sub", stream, size) for _ in range(o.consumers)]
        pubs = [self._spec("core", "pub", stream, size) for _ in range(o.producers)]
        results = await self._run("core NATS pub/sub", subs + pubs, o.duration_s + o.idle_s)
        delivered = sum(r.in_window for r in results[: len(subs)]) / o.duration_s
        published = sum(r.in_window for r in results[len(subs) :]) / o.duration_s
        self._record(
            size,
            "core_nats",
            {
                "pubsub_msgs_s": delivered,
                "pubsub_mb_s": delivered * size / MB,
                "publish_msgs_s": published,
            },
        )

    async def _eph_pubsub(self, size: int) -> None:
        """Ephemeral publish→deliver throughput: subscribers in one group, as core NATS's
        pub/sub phase uses one queue group."""
        o = self.options
        stream = self._stream("eph", size)
        await self._create("ephemeral", stream)
        subs = [
            self._spec("ephemeral", "sub", stream, size, group="bench") for _ in range(o.consumers)
        ]
        pubs = [self._spec("ephemeral", "pub", stream, size) for _ in range(o.producers)]
        try:
            results = await self._run("ephemeral pub/sub", subs + pubs, o.duration_s + o.idle_s)
        finally:
            await self._delete("ephemeral", stream)
        delivered = sum(r.in_window for r in results[: len(subs)]) / o.duration_s
        self._record(
            size,
            "ephemeral",
            {
                "pubsub_msgs_s": delivered,
                "pubsub_mb_s": delivered * size / MB,
                "publish_msgs_s": sum(r.in_window for r in results[len(subs) :]) / o.duration_s,
                "dropped": sum(r.errors for r in results[: len(subs)]),
            },
        )

    async def _fan_out(self, system: str, size: int) -> None:
        """One publisher, `FAN_OUT` consumers without a group over two workers."""
        o = self.options
        stream = self._stream("fan", size)
        await self._create(system, stream)
        role = "sub" if system == "ephemeral" else "fan"
        subs = [self._spec(system, role, stream, size, subscribers=FAN_OUT // 2) for _ in range(2)]
        pubs = [self._spec(system, "pub", stream, size)]
        try:
            results = await self._run(f"{system} fan-out", subs + pubs, o.duration_s + o.idle_s)
        finally:
            await self._delete(system, stream)
        delivered = sum(r.in_window for r in results[: len(subs)]) / o.duration_s
        self._record(
            size,
            system,
            {
                f"fanout_{FAN_OUT}_deliveries_s": delivered,
                f"fanout_{FAN_OUT}_publish_msgs_s": results[-1].in_window / o.duration_s,
            },
        )

    async def _request_reply(
        self,
        system: str,
        size: int,
        key: str = "rr",
        workers: int = 0,
        window: int = REQUESTS_IN_FLIGHT,
    ) -> None:
        """Round trips per second and their latency, recorded as `key`_per_s, _p50_ms,
        _p99_ms: one replier, `workers` requesters (0: `producers`) with `window`
        requests in flight each."""
        o = self.options
        stream = self._stream(key.replace("_", "-"), size)
        await self._create(system, stream)
        replier = [self._spec(system, "rep", stream, size)]
        requesters = [
            self._spec(system, "req", stream, size, window=window)
            for _ in range(workers or o.producers)
        ]
        try:
            results = await self._run(
                f"{system} request/reply", replier + requesters, o.duration_s + o.idle_s
            )
        finally:
            await self._delete(system, stream)
        samples = sorted(ns for r in results[1:] for ns in r.latencies_ns)
        self._record(
            size,
            system,
            {
                f"{key}_per_s": sum(r.in_window for r in results[1:]) / o.duration_s,
                f"{key}_p50_ms": percentile(samples, 50) / 1e6,
                f"{key}_p99_ms": percentile(samples, 99) / 1e6,
                f"{key}_errors": sum(r.errors for r in results[1:]),
            },
        )

    async def _one_at_a_time(self, system: str, size: int) -> None:
        """Publish→deliver of one message at a time (the next published once the last
        arrived): the path's own latency, nothing queued behind a message."""
        o = self.options
        stream = self._stream("ping", size)
        await self._create(system, stream)
        try:
            results = await self._run(
                f"{system} one at a time",
                [self._spec(system, "ping", stream, size, window=1)],
                o.duration_s + o.idle_s,
            )
        finally:
            await self._delete(system, stream)
        samples = sorted(results[0].latencies_ns)
        self._record(
            size,
            system,
            {
                "ping_p50_ms": percentile(samples, 50) / 1e6,
                "ping_p99_ms": percentile(samples, 99) / 1e6,
                "ping_samples": len(samples),
                "ping_errors": results[0].errors,
            },
        )

    async def _sequential(self, system: str, size: int) -> None:
        """One producer, each durable publish awaited before the next (Tamto:
        `send_and_wait`; JetStream: `js.publish`): the latency of the call a web
        handler makes, and the rate it allows."""
        o = self.options
        stream = self._stream("seq", size)
        await self._create(system, stream)
        routers = self.router_metrics.get(system, [])
        try:
            before = await rpc_totals(routers, ROUTER_APPEND)
            results = await self._run(
                f"{system} sequential publish",
                [self._spec(system, "seq", stream, size, window=1)],
                o.duration_s,
            )
            after = await rpc_totals(routers, ROUTER_APPEND)
        finally:
            await self._delete(system, stream)
        samples = sorted(results[0].latencies_ns)
        values = {
            "seq_publish_msgs_s": results[0].in_window / o.duration_s,
            "seq_p50_ms": percentile(samples, 50) / 1e6,
            "seq_p99_ms": percentile(samples, 99) / 1e6,
            "seq_samples": len(samples),
            "seq_errors": results[0].errors,
        }
        calls = after[1] - before[1]
        if calls > 0:
            # The routers' mean server time per Append during the phase: with R > 1 the
            # replicated append (Q of R replicas fsynced), with R = 1 one storage append.
            values["seq_router_append_ms"] = (after[0] - before[0]) / calls * 1e3
        self._record(size, system, values)

    async def _per_message(self, system: str, size: int) -> None:
        """One consumer process reading the publish phase's backlog message by message
        (Tamto: `async for` + `ack` each; JetStream: `fetch(100)` + `ack()` each) through
        a subscription of its own, for one window at most."""
        o = self.options
        stream = self._stream("tp", size)
        results = await self._run(
            f"{system} per-message consume",
            [self._spec(system, "iter", stream, size, group="bench-iter")],
            o.duration_s + o.idle_s,
        )
        total, rate = drain_rate(results)
        self._record(size, system, {"iter_consume_msgs_s": rate, "iter_consumed": total})

    async def _ceiling(self, size: int) -> None:
        o = self.options
        ports = [free_port(HOST) for _ in range(3)]
        path = self.workdir / f"ceiling-{size}.log"
        specs = [
            self._spec("ceiling", "sink", "", size, port=ports[2], path=str(path)),
            self._spec("ceiling", "hop", "", size, port=ports[1], target=f"{HOST}:{ports[2]}"),
            self._spec("ceiling", "hop", "", size, port=ports[0], target=f"{HOST}:{ports[1]}"),
            self._spec(
                "ceiling",
                "client",
                "",
                size,
                target=f"{HOST}:{ports[0]}",
                window=o.ceiling_inflight,
            ),
        ]
        try:
            results = await self._run("bare ceiling", specs, o.duration_s + 5)
        finally:
            path.unlink(missing_ok=True)
        rate = results[-1].in_window / o.duration_s
        self._record(size, "ceiling", {"msgs_s": rate, "mb_s": rate * size / MB})


async def run_bench(
    options: BenchOptions,
    progress: Progress,
    *,
    local: bool,
    target: TamtoTarget | None,
) -> dict[str, Any]:
    """Run every phase of `options` and return the JSON document of the results.

    With `local`, a whole Tamto starts in a temporary directory (and stops at the
    end); otherwise `target` names the running system. JetStream and core NATS run
    on a nats-server this function starts on a free loopback port.
    """
    o = options
    async with contextlib.AsyncExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tamto-bench-")))
        pool = WorkerPool(max(o.producers + o.consumers, 4))
        stack.callback(pool.close)
        sampler = await stack.enter_async_context(RssSampler())
        notes: list[str] = []
        storage_urls: list[str] = []
        routers: dict[str, list[str]] = {}
        pages: dict[str, dict[str, list[str]]] = {}
        tamto_pids: dict[str, dict[str, int]] = {}

        async def tamto_under_test(system: str, nodes: int) -> TamtoTarget:
            if local:
                where = workdir / system
                mqtt = "mqtt" in o.systems and system == "tamto"
                found = await stack.enter_async_context(local_tamto(where, nodes=nodes, mqtt=mqtt))
            elif target is None:
                raise BenchError("no Tamto to benchmark: pass --local or a gateway URL")
            else:
                found = target
            try:
                tamto_pids[system] = await service_pids(found.etcd)
                sampler.watch(system, tamto_pids[system])
                storage_urls.extend(await metrics_urls(found.etcd, "storage"))
                routers[system] = await metrics_urls(found.etcd, "router")
                pages[system] = {
                    service: await metrics_urls(found.etcd, service)
                    for service in {service for service, _, _ in LATENCY_HOPS}
                }
            except Exception as exc:  # memory is reported only when etcd says where
                notes.append(f"{system}: service memory not sampled: {exc}")
            return found

        tamto: TamtoTarget | None = None
        if {"tamto", "ephemeral", "functions", "http", "mqtt"} & set(o.systems):
            tamto = await tamto_under_test("tamto", 1)
        mosquitto: mqtt_bench.Broker | None = None
        if "mqtt" in o.systems:
            mqtt_bench.raise_fd_limit()
            mosquitto = await stack.enter_async_context(
                mqtt_bench.mosquitto_server(workdir / "mosquitto")
            )
            sampler.watch("mosquitto", {"mosquitto": mosquitto.pid})
        tamto_r3: TamtoTarget | None = None
        if "tamto-r3" in o.systems:
            tamto_r3 = await tamto_under_test("tamto-r3", o.nodes)
        nats_url: str | None = None
        if "jetstream" in o.systems or "core" in o.systems:
            nats_url, pid = await stack.enter_async_context(
                jetstream_server(workdir / "jetstream", o.jetstream_sync)
            )
            sampler.watch("jetstream", {"nats-server": pid})
        nats_r3_url: str | None = None
        if "jetstream-r3" in o.systems:
            nats_r3_url, pids = await stack.enter_async_context(
                jetstream_cluster(workdir / "jetstream-r3", o.jetstream_sync)
            )
            sampler.watch("jetstream-r3", pids)
        await pool.started()
        runner = Runner(o, pool, workdir, tamto, nats_url, tamto_r3, nats_r3_url)
        runner.mosquitto = mosquitto
        runner.service_pids = tamto_pids.get("tamto", {})
        runner.router_metrics = routers
        runner.service_metrics = pages
        plan = runner.phases()
        await runner.open_admin()
        stack.push_async_callback(runner.close_admin)
        progress.start(len(plan))

        async def unsealed() -> int:
            return await unsealed_bytes(storage_urls)

        started = time.time()
        settled_s = 0.0
        for label, phase in plan:
            progress.phase(label)
            settled = await sampler.settle(unsealed)
            settled_s += settled.waited_s
            if settled.cores >= 0.15:
                notes.append(
                    f"{label}: started with the services still busy ({settled.cores:.2f} cores)"
                )
            if settled.pending:
                notes.append(
                    f"{label}: started with {settled.pending / MIB:.1f} MiB not sealed yet"
                )
            await phase()
        progress.phase("done")
        elapsed = time.time() - started
    return {
        "tamto_bench_version": 1,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "elapsed_s": round(elapsed, 1),
        "settle_s": round(settled_s, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "options": {**asdict(o), "local": local},
        "jetstream_config": JETSTREAM_CONFIG.format(
            port="<free port>", store="<temp dir>", sync=o.jetstream_sync
        ),
        "cluster": {
            "tamto_r3": {
                "nodes": o.nodes,
                "gateways": len(tamto_r3.gateway_urls),
                "replication_factor": CLUSTER_REPLICAS,
                "ack_quorum": CLUSTER_QUORUM,
            }
            if tamto_r3 is not None
            else None,
            "jetstream_r3_config": JETSTREAM_CLUSTER_CONFIG.format(
                name="js-<i>",
                port="<free port>",
                store="<temp dir>/js-<i>/data",
                sync=o.jetstream_sync,
                cluster_port="<free port>",
                routes="<the three servers' cluster ports>",
            )
            if nats_r3_url is not None
            else None,
        },
        "sizes": runner.results,
        "memory_peak_rss_bytes": sampler.peaks,
        "notes": notes,
    }
