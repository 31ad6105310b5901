"""The processes a benchmark run owns: a local Tamto, a JetStream nats-server, an RSS sampler."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from tamto_common.config import parse_endpoints
from tamto_common.durable import make_dirs, write_atomic
from tamto_common.membership import Member, connect_etcd, list_members
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
HOST = "127.0.0.1"


class BenchSetupError(Exception):
    """A system under test could not be started or reached."""


@dataclass(frozen=True)
class TamtoTarget:
    """Where the Tamto under test is: gateway URL, API key and etcd endpoint."""

    url: str
    api_key: str
    etcd: str


def _discard(name: str, line: str) -> None:
    """Service logs are not shown during a benchmark (they would cost CPU, too)."""


@contextlib.asynccontextmanager
async def local_tamto(data_dir: Path, notify: bool = False) -> AsyncIterator[TamtoTarget]:
    """Start a whole Tamto on free loopback ports in `data_dir`; stop it on exit."""
    etcd = free_port(HOST)
    config = ClusterConfig(
        data_dir=data_dir,
        host=HOST,
        gateway_port=free_port(HOST),
        etcd_port=etcd,
        etcd_peer_port=free_port(HOST),
        nats_port=free_port(HOST),
        log_level="warning",
    )
    cluster = LocalCluster(config, _discard, lambda message: None)
    try:
        await cluster.start()
    except LaunchError as exc:
        await cluster.stop()
        raise BenchSetupError(f"local Tamto did not start: {exc}") from None
    try:
        yield TamtoTarget(config.gateway_url, cluster.credential, config.etcd_endpoint)
    finally:
        await cluster.stop()


async def _members(etcd_endpoint: str) -> list[Member]:
    client = await connect_etcd(parse_endpoints(etcd_endpoint), timeout_s=5)
    try:
        return await list_members(client)
    finally:
        await client.close()


async def service_pids(etcd_endpoint: str) -> dict[str, int]:
    """The pid of each registered service instance, named `service` or `service/instance`."""
    members = await _members(etcd_endpoint)
    counts: dict[str, int] = {}
    for member in members:
        counts[member.service] = counts.get(member.service, 0) + 1
    return {
        (m.service if counts[m.service] == 1 else f"{m.service}/{m.instance_id}"): m.pid
        for m in members
    }


async def storage_metrics_urls(etcd_endpoint: str) -> list[str]:
    """The Prometheus URLs of the registered storage nodes."""
    members = await _members(etcd_endpoint)
    return [f"http://{m.metrics_address}/metrics" for m in members if m.service == "storage"]


#: Storage's gauge of acked bytes not sealed into Parquet yet.
UNSEALED_METRIC = "tamto_storage_unsealed_bytes"


async def unsealed_bytes(urls: Sequence[str]) -> int:
    """What the storage nodes at `urls` still have to seal (their `UNSEALED_METRIC`);
    a node that does not answer counts as nothing left."""
    scrapes = (asyncio.to_thread(_gauge, url, UNSEALED_METRIC) for url in urls)
    values = await asyncio.gather(*scrapes)
    return int(sum(values))


def _gauge(url: str, name: str) -> float:
    """The sum of the gauge `name`'s samples on the metrics page at `url` (blocking)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
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
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._sample()
