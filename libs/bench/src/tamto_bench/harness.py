"""The processes a benchmark run owns: a local Tamto (one node or a cluster), a JetStream
nats-server (one, or a three-server cluster), an RSS sampler, and metric scrapes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import nats
import psutil
from prometheus_client.parser import text_string_to_metric_families

from tamto_common.config import parse_endpoints
from tamto_common.durable import make_dirs, write_atomic
from tamto_common.membership import Member, connect_etcd, list_members
from tamto_common.tasks import cancel_and_wait
from tamto_local.binaries import binary
from tamto_local.cluster import ClusterConfig, LaunchError, LocalCluster
from tamto_local.infra import tcp_open, wait_until
from tamto_local.ports import free_port
from tamto_local.process import ManagedProcess

#: The JetStream server configuration; `sync_interval: always` fsyncs every write
#: before the publish is acknowledged, as Tamto acknowledges only fsynced batches.
JETSTREAM_CONFIG = """\
listen: 127.0.0.1:{port}
max_payload: 8MB
jetstream {{
  store_dir: "{store}"
  sync_interval: {sync}
}}
"""
#: One server of the three-server JetStream cluster (`jetstream_cluster`): the same
#: settings as `JETSTREAM_CONFIG`, plus routes to the other two.
JETSTREAM_CLUSTER_CONFIG = """\
server_name: {name}
listen: 127.0.0.1:{port}
max_payload: 8MB
jetstream {{
  store_dir: "{store}"
  sync_interval: {sync}
}}
cluster {{
  name: bench
  listen: 127.0.0.1:{cluster_port}
  routes: [{routes}]
}}
"""
#: Servers of the JetStream cluster, and the replicas of its streams.
JETSTREAM_CLUSTER_SERVERS = 3
HOST = "127.0.0.1"
#: How long each service of a local Tamto may take to report healthy.
_READY_S = 180.0


class BenchSetupError(Exception):
    """A system under test could not be started or reached."""


@dataclass(frozen=True)
class TamtoTarget:
    """Where the Tamto under test is: gateway URL, API key and etcd endpoint, every
    gateway's URL when it has several (a cluster; `url` is the first), and the first
    one's HTTP API."""

    url: str
    api_key: str
    etcd: str
    gateways: tuple[str, ...] = ()
    #: The first gateway's HTTP API ("": not known, the HTTP phases are skipped).
    http_url: str = ""
    #: The first gateway's MQTT port (0: none, the MQTT phases are skipped).
    mqtt_port: int = 0
    #: The storage nodes' segment store URI and Iceberg catalog URI ("": none).
    segment_store: str = ""
    iceberg_catalog: str = ""

    @property
    def gateway_urls(self) -> tuple[str, ...]:
        """The gateways to spread clients over (at least `url`)."""
        return self.gateways or (self.url,)


def _discard(name: str, line: str) -> None:
    """Service logs are not shown during a benchmark (they would cost CPU, too)."""


@contextlib.asynccontextmanager
async def local_tamto(
    data_dir: Path,
    nodes: int = 1,
    mqtt: bool = False,
    segment_store: str = "",
    env: Mapping[str, str] | None = None,
    colocate: bool = False,
) -> AsyncIterator[TamtoTarget]:
    """Start a whole Tamto on free loopback ports in `data_dir` (with `nodes` > 1: that
    many storage nodes and routers and two gateways; with `mqtt`, its gateway serves
    MQTT, one node only; with `segment_store`, as `tamto up --segment-store`: "s3" for a
    SeaweedFS of its own, or a URI; `env`: settings for every service, such as
    TAMTO_STORAGE_SEAL_AGE_MS; with `colocate`, as `tamto up --colocate`); stop it on exit."""
    etcd = free_port(HOST)
    mqtt_port = free_port(HOST) if mqtt else 0
    extra_env = dict(env or {})
    if mqtt_port:
        extra_env["TAMTO_GATEWAY_MQTT_PORT"] = str(mqtt_port)
    config = ClusterConfig(
        data_dir=data_dir,
        host=HOST,
        gateway_port=free_port(HOST),
        etcd_port=etcd,
        etcd_peer_port=free_port(HOST),
        nats_port=free_port(HOST),
        log_level="warning",
        nodes=nodes,
        extra_env=extra_env,
        segment_store=segment_store,
        colocate=colocate,
    )
    # Generous: the worker processes start (and import pyarrow) at the same time, and a
    # cluster is eleven processes on a shared 2-core machine.
    cluster = LocalCluster(config, _discard, lambda message: None, ready_timeout_s=_READY_S)
    try:
        await cluster.start()
    except LaunchError as exc:
        await cluster.stop()
        raise BenchSetupError(f"local Tamto did not start: {exc}") from None
    try:
        yield TamtoTarget(
            config.gateway_url,
            cluster.credential,
            config.etcd_endpoint,
            tuple(cluster.gateway_urls()),
            cluster.http_urls()[0],
            mqtt_port,
            cluster.segment_store_uri,
            cluster.iceberg_catalog,
        )
    finally:
        await cluster.stop()


async def _members(etcd_endpoint: str) -> list[Member]:
    client = await connect_etcd(parse_endpoints(etcd_endpoint), timeout_s=5)
    try:
        return await list_members(client)
    finally:
        await client.close()


async def service_pids(etcd_endpoint: str) -> dict[str, int]:
    """The pid of each registered service instance, named `service` or `service/instance`;
    instances sharing a process (a co-located node) as one, their names joined by "+"."""
    members = await _members(etcd_endpoint)
    counts: dict[str, int] = {}
    for member in members:
        counts[member.service] = counts.get(member.service, 0) + 1
    names: dict[int, list[str]] = {}
    for m in members:
        names.setdefault(m.pid, []).append(
            m.service if counts[m.service] == 1 else f"{m.service}/{m.instance_id}"
        )
    return {"+".join(sorted(each)): pid for pid, each in names.items()}


async def metrics_urls(etcd_endpoint: str, service: str) -> list[str]:
    """The Prometheus URLs of the registered instances of `service`."""
    members = await _members(etcd_endpoint)
    return [f"http://{m.metrics_address}/metrics" for m in members if m.service == service]


#: Storage's gauge of acked bytes not sealed into Parquet yet.
UNSEALED_METRIC = "tamto_storage_unsealed_bytes"


async def unsealed_bytes(urls: Sequence[str]) -> int:
    """What the storage nodes at `urls` still have to seal (their `UNSEALED_METRIC`);
    a node that does not answer counts as nothing left."""
    return int(await metric_sum(urls, UNSEALED_METRIC))


#: The services' histogram of server time per gRPC call (tamto_common.grpc_errors).
RPC_SECONDS_METRIC = "tamto_rpc_server_seconds"


async def rpc_totals(urls: Sequence[str], method: str) -> tuple[float, int]:
    """Seconds spent in, and number of, successful calls of `method` (a full gRPC method
    name, e.g. ``/tamto.v1.Router/Append``) over the services at `urls` so far."""
    labels = {"method": method, "code": "OK"}
    seconds = await metric_sum(urls, f"{RPC_SECONDS_METRIC}_sum", labels)
    calls = await metric_sum(urls, f"{RPC_SECONDS_METRIC}_count", labels)
    return seconds, int(calls)


async def metric_sum(
    urls: Sequence[str], sample: str, labels: Mapping[str, str] | None = None
) -> float:
    """The sum of every `sample` (with `labels`, if given) on the metrics pages at `urls`;
    a page that does not answer counts as 0."""
    scrapes = (asyncio.to_thread(_sample_sum, url, sample, labels or {}) for url in urls)
    return float(sum(await asyncio.gather(*scrapes)))


def _sample_sum(url: str, sample: str, labels: Mapping[str, str]) -> float:
    """`metric_sum` of one page (blocking)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def _write_config(path: Path, text: str) -> None:
    make_dirs(path.parent)
    write_atomic(path, text.encode())


@contextlib.asynccontextmanager
async def jetstream_server(store: Path, sync: str = "always") -> AsyncIterator[tuple[str, int]]:
    """A nats-server with JetStream (file store in `store`) on a free loopback port.

    Yields its URL and pid. The same server also carries the core NATS workloads.
    """
    port = free_port(HOST)
    conf = store / "nats-server.conf"
    text = JETSTREAM_CONFIG.format(port=port, store=store / "data", sync=sync)
    await asyncio.to_thread(_write_config, conf, text)
    proc = ManagedProcess("nats-server", [str(binary("nats-server")), "-c", str(conf)])
    await proc.start()
    try:
        try:
            await wait_until(lambda: tcp_open(HOST, port), 30, "nats-server")
        except TimeoutError as exc:
            raise BenchSetupError(f"JetStream: {exc}; output: {proc.tail[-3:]}") from None
        if proc.pid is None:
            raise BenchSetupError("nats-server did not start")
        yield f"nats://{HOST}:{port}", proc.pid
    finally:
        await proc.stop()


@contextlib.asynccontextmanager
async def jetstream_cluster(
    store: Path, sync: str = "always"
) -> AsyncIterator[tuple[str, dict[str, int]]]:
    """`JETSTREAM_CLUSTER_SERVERS` nats-servers with JetStream, clustered over loopback
    routes, each with its own file store under `store`.

    Yields the client URLs (comma-separated, for `nats.connect`) and each server's pid,
    once the cluster has elected its JetStream meta leader (streams can be created).
    """
    n = JETSTREAM_CLUSTER_SERVERS
    ports = [free_port(HOST) for _ in range(n)]
    cluster_ports = [free_port(HOST) for _ in range(n)]
    routes = ", ".join(f"nats-route://{HOST}:{p}" for p in cluster_ports)
    procs: list[ManagedProcess] = []
    async with contextlib.AsyncExitStack() as stack:
        for i in range(n):
            name = f"js-{i + 1}"
            conf = store / name / "nats-server.conf"
            text = JETSTREAM_CLUSTER_CONFIG.format(
                name=name,
                port=ports[i],
                store=store / name / "data",
                sync=sync,
                cluster_port=cluster_ports[i],
                routes=routes,
            )
            await asyncio.to_thread(_write_config, conf, text)
            proc = ManagedProcess(name, [str(binary("nats-server")), "-c", str(conf)])
            await proc.start()
            stack.push_async_callback(proc.stop)
            procs.append(proc)
        url = ",".join(f"nats://{HOST}:{p}" for p in ports)
        try:
            for port in ports:
                await wait_until(functools.partial(tcp_open, HOST, port), 30, "nats-server")
            await wait_until(lambda: _jetstream_ready(url), 60, "JetStream meta leader")
        except TimeoutError as exc:
            tails = [line for proc in procs for line in proc.tail[-2:]]
            raise BenchSetupError(f"JetStream cluster: {exc}; output: {tails}") from None
        pids = {proc.name: proc.pid for proc in procs if proc.pid is not None}
        if len(pids) != n:
            raise BenchSetupError("a nats-server of the JetStream cluster did not start")
        yield url, pids


async def _jetstream_ready(url: str) -> bool:
    """Whether the JetStream cluster at `url` answers account requests (it has a meta
    leader, so a stream can be created)."""
    try:
        nc = await nats.connect(url.split(","), max_reconnect_attempts=0, connect_timeout=2)
    except Exception:  # not up yet
        return False
    try:
        await nc.jetstream(timeout=2).account_info()
    except Exception:  # no meta leader yet
        return False
    finally:
        await nc.close()
    return True


@dataclass(frozen=True)
class Settled:
    """How `RssSampler.settle` ended: seconds waited, cores the watched processes
    used in the last window, and what `pending` reported last."""

    waited_s: float
    cores: float
    pending: int


class RssSampler:
    """Samples the resident memory of named processes and keeps each one's peak;
    `settle` waits for them to go quiet."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self._interval = interval_s
        self._procs: dict[str, psutil.Process] = {}
        self.peaks: dict[str, dict[str, int]] = {}
        self._groups: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None

    def watch(self, group: str, pids: dict[str, int]) -> None:
        """Start sampling `pids` (name → pid), reported under `group`."""
        self.peaks.setdefault(group, {})
        for name, pid in pids.items():
            key = f"{group}:{name}"
            try:
                self._procs[key] = psutil.Process(pid)
            except psutil.Error:
                continue  # not on this machine (a remote system) or gone
            self._groups[key] = group
            self.peaks[group][name] = 0
        self._sample()

    def _sample(self) -> None:
        for key, proc in list(self._procs.items()):
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                del self._procs[key]
                continue
            group, name = key.split(":", 1)
            self.peaks[group][name] = max(self.peaks[group][name], rss)

    async def settle(
        self,
        pending: Callable[[], Awaitable[int]] | None = None,
        busy_cores: float = 0.15,
        window_s: float = 0.5,
        limit_s: float = 60.0,
    ) -> Settled:
        """Wait until the watched processes together use less than `busy_cores` of CPU
        over `window_s` and `pending()` (work the system has queued but not started,
        such as bytes to seal) is 0, for at most `limit_s`.

        A phase should not measure the background work the previous one left
        (Tamto sealing a backlog into Parquet, nats-server deleting a stream).
        Quiet processes are not enough: storage seals the last part of a phase's
        data by age, seconds after the phase, so `pending` waits for that too.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            before = self._cpu_seconds()
            await asyncio.sleep(window_s)
            cores = (self._cpu_seconds() - before) / window_s
            left = await pending() if pending is not None and cores < busy_cores else 0
            waited = loop.time() - started
            if (cores < busy_cores and not left) or waited >= limit_s:
                return Settled(waited, cores, left)

    def _cpu_seconds(self) -> float:
        total = 0.0
        for proc in list(self._procs.values()):
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    async def _loop(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(self._interval)

    async def __aenter__(self) -> RssSampler:
        self._task = asyncio.create_task(self._loop(), name="rss-sampler")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await cancel_and_wait(self._task)
        self._sample()
