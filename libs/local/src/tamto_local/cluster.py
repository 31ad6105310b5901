"""A whole Tamto system on one machine, each part a supervised process.

`LocalCluster` starts etcd and nats-server, then auth, storage and router side by
side, then the gateway (each wave waiting until every process of it reports
healthy over the gRPC health service: a gateway finds every router and storage node
registered from its first request on), restarts any of them that dies (etcd and
nats-server too, on the same data and port), and stops everything in reverse
order. Every byte of state lives under one data
directory: starting again on the same directory reuses etcd's data, the
partitions' logs and the development credential.

With `nodes` N > 1 (`tamto up --nodes N`) it runs N storage nodes and N routers
and two gateways (processes `storage`, `storage-2`, ..., `gateway`, `gateway-2`;
see `tamto_local.layout`), each with its own data directory `<dir>/node-<i>/<service>`
and instance id (`storage-1`, `storage-2`, ...), all on loopback. With `colocate`
(`tamto up --colocate`) each node's storage node and router run as one process
(`tamto_local.colocate`).

The services (not etcd, NATS or SeaweedFS) are forked from a fork server that imported
their libraries once (`tamto_local.forking`), so a start or restart costs a fork, not a
second of imports; `ClusterConfig.fork` False (`tamto up --no-fork`) starts each as
`python -m tamto_<service>`, as do services placed elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tamto_common.durable import DamagedFile
from tamto_common.health import grpc_healthy
from tamto_local.colocate import COLOCATED, colocated, is_node, node_argv, node_env, part
from tamto_local.forking import AsyncForkServer, ForkedManagedProcess, forkable
from tamto_local.infra import (
    EtcdSpec,
    NatsSpec,
    etcd_argv,
    nats_argv,
    port_in_use,
    tcp_open,
    wait_until,
)

# LaunchError is what `LocalCluster.start` raises.
from tamto_local.layout import LaunchError as LaunchError
from tamto_local.layout import (
    ServiceEnv,
    cluster_secret,
    dev_credential,
    launcher_tls,
    node_processes,
    service_argv,
    service_env,
    split_process,
)
from tamto_local.ports import free_port, reserve
from tamto_local.process import LineSink, ManagedProcess
from tamto_local.s3 import STOP_GRACE_S, S3Spec, create_bucket, weed_argv
from tamto_local.tls import ensure_dev_pki

#: The most nodes `tamto up --nodes` runs on one machine.
MAX_NODES = 16
#: The infrastructure the services need, started before them and supervised like them.
INFRA = ("etcd", "nats")
#: A process that exits sooner than this after its start is crash-looping: its
#: restarts back off (0.5 s more each time, up to 5 s); any other exit restarts at once.
CRASH_LOOP_S = 5.0


@dataclass(frozen=True)
class ClusterConfig:
    data_dir: Path
    host: str = "127.0.0.1"
    gateway_port: int = 7400
    etcd_port: int = 7379
    etcd_peer_port: int = 7380
    nats_port: int = 7422
    lease_ttl_s: int = 5
    log_level: str = "info"
    extra_env: dict[str, str] = field(default_factory=dict)
    #: Serve TLS on every service port (mTLS between services), with a development CA.
    tls: bool = False
    #: Storage nodes and routers to run (`tamto up --nodes`); more than one adds a gateway.
    nodes: int = 1
    #: The storage nodes' segment store (`tamto up --segment-store`): "" for each node's
    #: data directory, "s3" for a SeaweedFS started here (`tamto_local.s3`), or a URI.
    segment_store: str = ""
    #: Service processes run elsewhere: name -> (the host it binds and advertises, a
    #: prefix of its command), e.g. in a network namespace (`tamto_local.netlab`).
    placed: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    #: Each node's storage node and router as one process (`tamto_local.node`).
    colocate: bool = False
    #: Fork the services from a fork server (`tamto_local.forking`); False: start each
    #: as `python -m tamto_<service>` (`tamto up --no-fork`).
    fork: bool = True

    @property
    def tls_dir(self) -> Path:
        """Where the development CA and certificates live (`tamto up --tls`)."""
        return self.data_dir / "tls"

    @property
    def gateway_url(self) -> str:
        return f"{'tamtos' if self.tls else 'tamto'}://{self.gateway_address}"

    @property
    def etcd_endpoint(self) -> str:
        return f"{self.host}:{self.etcd_port}"

    @property
    def nats_url(self) -> str:
        return f"nats://{self.host}:{self.nats_port}"

    @property
    def gateway_address(self) -> str:
        return f"{self.host}:{self.gateway_port}"


class LocalCluster:
    """Owns every process of a local system and the task that supervises them."""

    def __init__(
        self,
        config: ClusterConfig,
        sink: LineSink,
        notify: Callable[[str], None],
        ready_timeout_s: float = 60.0,
    ) -> None:
        self.config = config
        self._sink = sink
        self._notify = notify
        self._ready_timeout = ready_timeout_s
        self.credential = ""
        self.cluster_secret = ""
        self.ports: dict[str, int] = {}
        #: Each gateway's HTTP API port (`tamto_gateway.http`), by process name.
        self.http_ports: dict[str, int] = {}
        #: Each gateway's MQTT port (`tamto_gateway.mqtt`), by process name.
        self.mqtt_ports: dict[str, int] = {}
        self.processes: dict[str, ManagedProcess] = {}
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        #: The service processes, in start order (`node_processes`).
        self.names = node_processes(config.nodes, processing=True)
        if config.colocate:
            self.names = colocated(self.names)
        self.restarts: dict[str, int] = dict.fromkeys((*INFRA, *self.names), 0)
        self._infra: dict[str, tuple[list[str], int]] = {}  # name -> (argv, port)
        self._started_at: dict[str, float] = {}
        self._quick_exits: dict[str, int] = dict.fromkeys((*INFRA, *self.names), 0)
        #: What storage nodes are told about the segment store (`_start_segment_store`).
        self._store_env: dict[str, str] = {}
        self._forker: AsyncForkServer | None = None
        self._forker_lock = asyncio.Lock()

    @property
    def segment_store_uri(self) -> str:
        """The segment store URI storage nodes were given ("": none), once started."""
        return self._store_env.get("TAMTO_STORAGE_SEGMENT_STORE", "")

    @property
    def iceberg_catalog(self) -> str:
        """The Iceberg catalog URI storage nodes were given ("": none), once started."""
        return self._store_env.get("TAMTO_STORAGE_ICEBERG_CATALOG", "")

    def gateway_urls(self) -> list[str]:
        """Every gateway's URL (two with several nodes), once started."""
        scheme = "tamtos" if self.config.tls else "tamto"
        return [
            f"{scheme}://{self.config.host}:{port}"
            for name, port in self.ports.items()
            if split_process(name)[0] == "gateway"
        ]

    def http_urls(self) -> list[str]:
        """Every gateway's HTTP API URL, once started."""
        scheme = "https" if self.config.tls else "http"
        return [f"{scheme}://{self.config.host}:{port}" for port in self.http_ports.values()]

    def mqtt_addresses(self) -> list[str]:
        """Every gateway's MQTT broker as host:port, once started."""
        return [f"{self.config.host}:{port}" for port in self.mqtt_ports.values()]

    def _check_ports(self) -> None:
        c = self.config
        for what, port in (
            ("--gateway-port", c.gateway_port),
            ("--etcd-port", c.etcd_port),
            ("etcd peer port", c.etcd_peer_port),
            ("--nats-port", c.nats_port),
        ):
            if port_in_use(c.host, port):
                raise LaunchError(f"{what} {c.host}:{port} is already in use")

    def _service_env(self, name: str) -> dict[str, str]:
        if is_node(name):
            return node_env(name, self._service_env)
        c = self.config
        env = service_env(
            split_process(name)[0],
            ServiceEnv(
                c.etcd_endpoint,
                c.nats_url,
                c.data_dir,
                self.credential,
                c.lease_ttl_s,
                c.log_level,
                c.host,
                c.tls_dir if c.tls else None,
                self.cluster_secret,
            ),
            self.ports[name],
            {**c.extra_env, **self._store_env} if name.startswith("storage") else c.extra_env,
            process=name,
            nodes=c.nodes,
            http_port=self.http_ports.get(name, 0),
            mqtt_port=self.mqtt_ports.get(name, 0),
        )
        if name in c.placed:
            env["TAMTO_HOST"] = c.placed[name][0]
        return env

    async def start(self) -> None:
        """Start everything and wait until every service reports SERVING."""
        c = self.config
        self._check_ports()
        c.data_dir.mkdir(parents=True, exist_ok=True)
        self.credential = dev_credential(c.data_dir)
        self.cluster_secret = cluster_secret(c.data_dir)
        if c.tls:
            try:
                await asyncio.to_thread(ensure_dev_pki, c.tls_dir)
            except DamagedFile as exc:
                raise LaunchError(
                    f"{exc}: delete {c.tls_dir} to make a new development PKI"
                ) from None
        # etcd, NATS and the first gateway bind the ports given after the services'
        # ports are chosen: none of those may be chosen for a service.
        reserve(c.gateway_port, c.etcd_port, c.etcd_peer_port, c.nats_port)
        self.ports = {name: free_port(c.host) for name in self.names}
        for node in filter(is_node, self.names):
            self.ports.update({part(node, s): free_port(c.host) for s in COLOCATED})
        self.ports["gateway"] = c.gateway_port
        gateways = [name for name in self.names if split_process(name)[0] == "gateway"]
        self.http_ports = {name: free_port(c.host) for name in gateways}
        self.mqtt_ports = {name: free_port(c.host) for name in gateways}

        etcd = EtcdSpec(c.data_dir / "etcd", c.etcd_port, c.etcd_peer_port, c.host)
        await self._start_infra("etcd", etcd_argv(etcd), c.etcd_port)
        await self._start_infra("nats", nats_argv(NatsSpec(c.nats_port, c.host)), c.nats_port)
        await self._start_segment_store()
        # A service's start is mostly Python's imports: side by side they take a
        # one-node system about as long as one service alone on two cores. Each
        # registers in etcd before it reports SERVING, and finds the others there
        # when it needs them; only the gateways wait for the rest to serve.
        backends = [n for n in self.names if split_process(n)[0] != "gateway"]
        await self._start_services(backends)
        await self._start_services([n for n in self.names if n not in backends])
        self._supervisor = asyncio.create_task(self._supervise(), name="supervisor")

    async def _start_segment_store(self) -> None:
        """Start SeaweedFS for ``--segment-store s3`` (its data under the data directory),
        or pass a store URI on; every storage node is told where the store is."""
        c = self.config
        if not c.segment_store:
            return
        # Every stream of the store is an Iceberg table too; one SQLite catalog, here.
        catalog = {"TAMTO_STORAGE_ICEBERG_CATALOG": f"sqlite:///{c.data_dir / 'iceberg.db'}"}
        if c.segment_store != "s3":
            self._store_env = {"TAMTO_STORAGE_SEGMENT_STORE": c.segment_store, **catalog}
            return
        spec = S3Spec(c.data_dir / "seaweedfs", host=c.host)
        self.restarts["seaweedfs"] = self._quick_exits["seaweedfs"] = 0
        await self._start_infra("seaweedfs", weed_argv(spec), spec.ports["s3.port"])
        await self._wait("seaweedfs", lambda: asyncio.to_thread(create_bucket, spec))
        self._store_env = {"TAMTO_STORAGE_SEGMENT_STORE": spec.uri(), **spec.env(), **catalog}
        self._notify(f"segment store: {spec.uri()}; Iceberg catalog: {catalog}")

    async def _start_infra(self, name: str, argv: list[str], port: int) -> None:
        self._infra[name] = (argv, port)
        proc = ManagedProcess(name, argv, sink=self._sink)
        self.processes[name] = proc
        self._started_at[name] = time.monotonic()
        await proc.start()
        await self._wait(name, lambda: tcp_open(self.config.host, port))

    async def _start_services(self, names: list[str]) -> None:
        """Start `names` at once and wait until each serves; the first failure is raised
        once the others' waits are cancelled (their processes are `stop`'s to end)."""
        starts = [asyncio.create_task(self._start_service(n), name=f"start-{n}") for n in names]
        try:
            await asyncio.gather(*starts)
        finally:
            for start in starts:
                start.cancel()
            await asyncio.gather(*starts, return_exceptions=True)

    async def _start_service(self, name: str) -> None:
        host, prefix = self.config.placed.get(name, (self.config.host, ()))
        argv = [*prefix, *(node_argv() if is_node(name) else service_argv(split_process(name)[0]))]
        proc = await self._service_process(name, argv)
        self.processes[name] = proc
        self._started_at[name] = time.monotonic()
        try:
            await proc.start()
        except OSError as exc:
            raise LaunchError(f"{name} could not start: {exc}") from None
        tls = launcher_tls(self.config.tls_dir if self.config.tls else None)
        served = [part(name, s) for s in COLOCATED] if is_node(name) else [name]
        for address in [f"{host}:{self.ports[each]}" for each in served]:
            await self._wait(name, functools.partial(grpc_healthy, address, tls=tls))

    async def _service_process(self, name: str, argv: list[str]) -> ManagedProcess:
        """Service `name`'s process running `argv`: forked when `argv` is one the fork
        server can run (`python -m <module>`, no prefix) and forking is on."""
        env = self._service_env(name)
        module = forkable(argv) if self.config.fork else None
        if module is None:
            return ManagedProcess(name, argv, env=env, sink=self._sink)
        async with self._forker_lock:
            if self._forker is None or not self._forker.alive():
                self._forker = await AsyncForkServer.start()
                self._notify(f"services fork from a fork server (pid {self._forker.pid})")
        return ForkedManagedProcess(name, module, self._forker, env=env, sink=self._sink)

    async def _wait(self, name: str, check: Callable[[], object]) -> None:
        """Wait until `name` passes `check`; LaunchError at once if it exits first (the wait
        retries a check's errors, so the exit ends the wait rather than raising in it)."""
        proc = self.processes[name]

        async def ready_or_exited() -> bool:
            return not proc.running() or bool(await check())  # type: ignore[misc]

        try:
            await wait_until(ready_or_exited, self._ready_timeout, name)
        except TimeoutError as exc:
            raise LaunchError(str(exc)) from None
        if not proc.running():
            tail = proc.tail[-1] if proc.tail else "no output"
            raise LaunchError(f"{name} exited with code {proc.returncode}: {tail}")

    async def _restart(self, name: str) -> None:
        if name in self._infra:
            await self._start_infra(name, *self._infra[name])
        else:
            await self._start_service(name)

    async def _supervise(self) -> None:
        """Restart any process (service, etcd or nats-server) that exits while the cluster
        is up. Each has a watcher of its own: a restart that waits for etcd, or fails,
        delays no other process's."""
        watchers = [
            asyncio.create_task(self._watch(name), name=f"watch-{name}") for name in self.processes
        ]
        try:
            await asyncio.gather(*watchers)
        finally:
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

    async def _watch(self, name: str) -> None:
        while not self._stopping:
            code = await self.processes[name].wait()
            if self._stopping:
                return
            self.restarts[name] += 1
            self._notify(f"{name} exited with code {code}; restarting it")
            ran = time.monotonic() - self._started_at.get(name, 0.0)
            quick = self._quick_exits[name] + 1 if ran < CRASH_LOOP_S else 0
            self._quick_exits[name] = quick
            await asyncio.sleep(min(5.0, 0.5 * quick))  # a crash loop must not spin the CPU
            try:
                await self._restart(name)
                self._notify(f"{name} is back (restart {self.restarts[name]})")
            except LaunchError as exc:
                self._notify(f"{name} failed to restart: {exc}")
                await self.processes[name].kill()  # not serving: ended, to be started again

    async def kill(self, name: str) -> None:
        """Crash one process with SIGKILL (for demos and tests of recovery)."""
        await self.processes[name].kill()

    async def stop(self) -> None:
        """Stop services, then NATS and etcd, each with SIGTERM (SIGKILL after a timeout)."""
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        for name in (*reversed(self.names), "seaweedfs", "nats", "etcd"):
            proc = self.processes.get(name)
            if proc is not None and proc.running():
                started = time.monotonic()
                code = await proc.stop(STOP_GRACE_S if name == "seaweedfs" else 10.0)
                self._notify(f"{name} stopped (code {code}, {time.monotonic() - started:.1f}s)")
        if self._forker is not None:
            await self._forker.close()
