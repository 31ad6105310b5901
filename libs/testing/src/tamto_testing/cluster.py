"""A Tamto system for tests: every service a real process on a free port.

Services come up in two waves (the gateways last, `TestCluster.start_all`) and are
waited on through the gRPC health service. Tests crash them with `kill9`, start
them again with `start`, and read their logs from `<workdir>/logs/<service>.log`.

`TestCluster(..., nodes=N)` with N > 1 runs N storage nodes and N routers
(`storage`, `storage-2`, ..., `router`, `router-2`, ...: each its own port,
instance id and data directory `<workdir>/node-<i>/<service>`) and two
gateways (`gateway`, `gateway-2`): the processes of `tamto up --nodes N`
(`tamto_local.layout.node_processes`).

`host` is the address every service binds and advertises (127.0.0.1 by default;
a partition test gives the root end of a `tamto_testing.netns.Netns` veth, which
both namespaces reach), and `run_in(name, host, argv_prefix)` starts one process
elsewhere: inside a network namespace, bound to its address.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tamto_common.config import parse_endpoints
from tamto_common.ledgers import LEDGERS, LedgerList
from tamto_common.membership import connect_etcd, list_members
from tamto_common.tls import TlsMaterial
from tamto_local.layout import (
    ALL_SERVICES,
    ServiceEnv,
    dev_credential,
    launcher_tls,
    node_processes,
    process_data_dir,
    service_argv,
    service_env,
    split_process,
)
from tamto_local.ports import free_port
from tamto_local.tls import ensure_dev_pki
from tamto_testing.forked import ForkedProcess, forking
from tamto_testing.infra import Infra
from tamto_testing.processes import START_TIMEOUT_S, TestProcess


def healthy(address: str, tls: TlsMaterial | None = None) -> bool:
    channel = (
        grpc.insecure_channel(address)
        if tls is None
        else grpc.secure_channel(address, tls.channel_credentials())
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
        return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


class TestCluster:
    """auth, storage, router and gateway as processes, sharing one etcd and NATS."""

    __test__ = False

    def __init__(
        self,
        workdir: Path,
        infra: Infra,
        lease_ttl_s: int = 3,
        tls: bool = False,
        nodes: int = 1,
        host: str = "127.0.0.1",
        storage_env: Mapping[str, str] | None = None,
    ) -> None:
        """`storage_env`: more environment for the storage nodes (say a segment store's
        ``TAMTO_STORAGE_SEGMENT_STORE`` and credentials)."""
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, not {nodes}")
        self.workdir = workdir
        self.nodes = nodes
        # A deleted stream's data goes a second after its deletion (5 min in production):
        # a test that deletes a stream can use its name again soon after.
        self._storage_env = {"TAMTO_STORAGE_STREAM_DELETE_GRACE_MS": "1000", **(storage_env or {})}
        # A service drains its in-flight calls for 1 s on SIGTERM (5 s in production):
        # its long-lived streams (deliveries, its peers' streams) never end by
        # themselves, so a process stopped with clients connected waited the whole grace.
        self._service_env = {"TAMTO_SHUTDOWN_GRACE_S": "1"}
        self.host = host
        self.infra = infra
        self.credential = dev_credential(workdir)
        # A distinct etcd prefix is not needed: every cluster gets its own instance
        # ids. The workdir's name alone is not unique (every `fresh_cluster` is
        # `<tmp_path>/cluster`), and clusters one after another in one etcd must
        # not share member keys, so a random part follows it.
        self._suffix = f"{workdir.name}-{secrets.token_hex(3)}"
        forget_the_dead(infra.etcd_endpoint)
        self.tls_dir = workdir / "tls" if tls else None
        if self.tls_dir is not None:
            ensure_dev_pki(self.tls_dir)
        self.shared = ServiceEnv(
            infra.etcd_endpoint,
            infra.nats_url,
            workdir,
            self.credential,
            lease_ttl_s,
            "info",
            host=host,
            tls_dir=self.tls_dir,
        )
        self._launcher_tls = launcher_tls(self.tls_dir)
        self.ports = {name: free_port() for name in ALL_SERVICES}
        for name in node_processes(nodes):
            if name not in self.ports:
                self.ports[name] = free_port()
        #: Each gateway's HTTP API port (`tamto_gateway.http`), by process name.
        self.http_ports = {
            name: free_port() for name in node_processes(nodes) if name.startswith("gateway")
        }
        self.processes: dict[str, TestProcess] = {}
        #: Processes run elsewhere (`run_in`): name -> (host, argv prefix).
        self._placed: dict[str, tuple[str, list[str]]] = {}

    def run_in(self, name: str, host: str, argv_prefix: list[str]) -> None:
        """Start process `name` (from now on) with `argv_prefix` before its command,
        binding and advertising `host`: e.g. inside a network namespace."""
        self._placed[name] = (host, list(argv_prefix))

    @property
    def gateway_address(self) -> str:
        return self.address("gateway")

    @property
    def url(self) -> str:
        scheme = "tamto" if self.tls_dir is None else "tamtos"
        return f"{scheme}://{self.gateway_address}"

    def http_url(self, name: str = "gateway") -> str:
        """The base URL of gateway `name`'s HTTP API."""
        scheme = "http" if self.tls_dir is None else "https"
        return f"{scheme}://{self.address(name).rsplit(':', 1)[0]}:{self.http_ports[name]}"

    @property
    def ca_file(self) -> Path:
        """The development CA of a TLS cluster."""
        assert self.tls_dir is not None, "not a TLS cluster"
        return self.tls_dir / "ca.pem"

    def audit_file(self, name: str) -> Path:
        """Where service `name` (auth or gateway) appends audit records."""
        return self.data_dir(name) / "audit.jsonl"

    def address(self, name: str) -> str:
        host = self._placed.get(name, (self.host, []))[0]
        return f"{host}:{self.ports[name]}"

    def instance_id(self, name: str) -> str:
        """The instance id service `name` of this cluster registers under in etcd."""
        return f"{name}-{self._suffix}"

    def storages(self) -> list[str]:
        """The names of this cluster's storage nodes (`storage`, `storage-2`, ...)."""
        return [n for n in node_processes(self.nodes) if split_process(n)[0] == "storage"]

    def routers(self) -> list[str]:
        """The names of this cluster's routers (`router`, `router-2`, ...)."""
        return [n for n in node_processes(self.nodes) if split_process(n)[0] == "router"]

    def data_dir(self, name: str) -> Path:
        """The data directory of process `name` (`<workdir>/node-<i>/<service>` when
        the cluster has several nodes, `<workdir>/<service>` otherwise)."""
        return process_data_dir(self.workdir, name, self.nodes)

    def start(
        self, name: str, timeout_s: float = START_TIMEOUT_S, extra_env: dict[str, str] | None = None
    ) -> TestProcess:
        """Start process `name`: a service (`storage`) or one node's (`storage-2`)."""
        proc = self._spawn(name, extra_env)
        self._wait_ready(name, timeout_s)
        return proc

    def _spawn(self, name: str, extra_env: dict[str, str] | None) -> TestProcess:
        """Start process `name` without waiting for it (`_wait_ready` does); a further
        process of a service (`processing-2`) gets a free port the first time."""
        service, _ = split_process(name)
        self.ports.setdefault(name, free_port())
        if service == "storage":
            extra_env = {**self._storage_env, **(extra_env or {})}
        extra_env = {**self._service_env, **(extra_env or {})}
        env = service_env(
            service,
            self.shared,
            self.ports[name],
            extra_env,
            process=name,
            nodes=self.nodes,
            http_port=self.http_ports.get(name, 0),
        )
        env[f"TAMTO_{service.upper()}_INSTANCE_ID"] = self.instance_id(name)
        prefix: list[str] = []
        if name in self._placed:  # else service_env bound it to the cluster's host
            env["TAMTO_HOST"], prefix = self._placed[name]
        log = self.workdir / "logs" / f"{name}.log"
        proc: TestProcess
        if prefix or not forking():
            proc = TestProcess(name, [*prefix, *service_argv(service)], log, env)
        else:  # the same `python -m tamto_<service>`, without its imports (tamto_testing.forked)
            proc = ForkedProcess(name, f"tamto_{service}", log, env)
        self.processes[name] = proc.start()
        return proc

    def _wait_ready(self, name: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until process `name` serves (gRPC health), failing with its log's tail."""
        self.processes[name].wait_ready(
            lambda: healthy(self.address(name), self._launcher_tls), timeout_s
        )

    def start_all(self, extra_env: Mapping[str, dict[str, str]] | None = None) -> TestCluster:
        """Start every service, each node's storage and router (two gateways with
        several nodes); `extra_env` adds variables per service name.

        In two waves, each started at once and then waited on: auth, the storage
        nodes and the routers, then the gateways. A process's start is mostly
        Python's imports (seconds each on a loaded 2-core machine), so starting
        them side by side took a one-node cluster from 27 s to 9 s at load 7. Each
        service registers in etcd before it reports SERVING, and the others find it
        there when they need it (routers fetch auth's keys on the first token), so
        only the gateways wait: they start once every other process serves, and see
        every router and storage node registered from their first request on, as
        when processes started one by one.
        """
        names = node_processes(self.nodes)
        backends = [n for n in names if split_process(n)[0] != "gateway"]
        self.start_together(backends, extra_env)
        self.start_together([n for n in names if n not in backends], extra_env)
        return self

    def start_together(
        self, names: Sequence[str], extra_env: Mapping[str, dict[str, str]] | None = None
    ) -> None:
        """Start processes `names` at once, then wait until each serves (`start`, side
        by side); `extra_env` adds variables per service name (`router`, not `router-2`)."""
        for name in names:
            self._spawn(name, (extra_env or {}).get(split_process(name)[0]))
        for name in names:
            self._wait_ready(name)

    @contextlib.contextmanager
    def running(
        self, extra_env: Mapping[str, dict[str, str]] | None = None
    ) -> Iterator[TestCluster]:
        """Every service started (`start_all`) for the block and stopped after it,
        also when one of them fails to start: what a cluster fixture yields."""
        try:
            yield self.start_all(extra_env)
        finally:
            self.stop_all()

    def start_gateway(
        self, timeout_s: float = START_TIMEOUT_S, extra_env: dict[str, str] | None = None
    ) -> str:
        """Start one more gateway of this cluster (``gateway-2``, ``gateway-3``, ...:
        its own port and instance id, the same etcd, NATS and peers; `extra_env` as
        `start` takes it) and return its URL. `stop_all` stops it too; `kill9` and
        `stop` take its name."""
        name = f"gateway-{sum(1 for n in self.processes if n.startswith('gateway-')) + 2}"
        self.ports[name] = free_port()
        self.start(name, timeout_s, extra_env)
        scheme = "tamto" if self.tls_dir is None else "tamtos"
        return f"{scheme}://{self.address(name)}"

    def kill9(self, name: str) -> None:
        self.processes[name].kill9()

    def stop(self, name: str) -> int | None:
        return self.processes[name].stop()

    def stop_all(self) -> None:
        """Stop every process (SIGTERM; SIGKILL after `stop`'s timeout) in waves, the start
        reversed: every gateway, then every router, every storage node, auth; each wave
        signalled at once, then waited for.

        A stopping service drains its calls in flight for up to its shutdown grace (5 s),
        and a gateway or router still running keeps its streams to it open that long:
        stopped one by one, gateway-2 first, a three-node cluster took 22 s to stop after
        traffic (router-2, router-3, storage-2 and storage-3 5 s each) at load 12.
        """
        waves: dict[int, list[str]] = {}
        for name in self.processes:
            waves.setdefault(ALL_SERVICES.index(split_process(name)[0]), []).append(name)
        for _, wave in sorted(waves.items(), reverse=True):
            self.stop_together(wave)

    def stop_together(self, names: Sequence[str]) -> None:
        """Stop processes `names` side by side: SIGTERM to each at once, then wait for
        each (`stop`), so their shutdown graces run at the same time."""
        for name in names:
            self.processes[name].send(signal.SIGTERM)
        for name in names:
            self.processes[name].stop()


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this machine runs (a zombie, killed but not yet
    reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def forget_the_dead(etcd_endpoint: str) -> None:
    """Delete the members whose process is gone, then the ledger lists
    (`/tamto/ledgers/...`) whose storage nodes are all gone.

    A test session shares one etcd among many test clusters. A service an earlier
    test killed stays registered until its lease ends, and a new cluster would count
    it: a stream's default replication factor counts the registered storage nodes.
    Every test cluster's processes run on this machine, so a member whose pid is not
    alive here is dead. Tests also reuse stream names ("s"): a ledger list left by an
    earlier cluster names storage nodes that will never come back, so the router of a
    new cluster would refuse the partition as placed on a missing node (which is
    right for a real cluster, where etcd and the data belong together). Lists naming
    a node that is still registered (a cluster still running, e.g. a module's) are kept.
    """

    async def forget() -> None:
        etcd = await connect_etcd(parse_endpoints(etcd_endpoint))
        try:
            for member in await list_members(etcd):
                if not process_alive(member.pid):
                    await etcd.delete(member.key.encode())
            live = {m.instance_id for m in await list_members(etcd, "storage")}
            for kv in await etcd.get_prefix(LEDGERS.encode()):
                ledgers = LedgerList.from_json("", 0, kv.value, kv.mod_revision)
                if not {node for ledger in ledgers.ledgers for node in ledger.ensemble} & live:
                    await etcd.delete(kv.key)
        finally:
            await etcd.close()

    # In a thread of its own: the caller may be sync code or inside a running loop.
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(forget())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="forget-dead-placements")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
