"""A randomized fault campaign against a whole local system.

`run_campaign` starts a supervised local system (`tamto_local.LocalCluster`,
which restarts any process that exits, etcd and nats-server included) on free
ports, runs producers that publish with ids and a consumer that acks what it
receives, and meanwhile hits random processes with faults, one at a time:
`kill -9` (the launcher restarts it) or SIGSTOP for a while, then SIGCONT. A
random fault comes every few seconds on a process that is not down already, so
faults overlap when a restart takes longer than the gap (as on a busy machine).
At the end a fresh subscription reads the stream from the start, and
`tamto_cli.chaos.checker` judges what was recorded.

A fixed `plan` of faults replaces the random choice (the etcd and NATS outage
tests use one): one at a time, each after every client moved again.

With `nodes` N > 1 the system is a cluster (`tamto up --nodes N`: N storage nodes
and N routers, two gateways; the stream gets the default replication, R = min(3, N)
with a majority quorum) and a target names a service: each fault hits one of its
processes at random (`storage-2`, `router-3`, ...).

With `network` (`tamto chaos --network`) each node's storage node and router run in
a network namespace of the campaign's, and network faults (cuts of one node, a
minority/majority split, a one-way cut, delays: `tamto_cli.chaos.network`) join the
kinds, one at a time. The campaign then also checks what the routers recorded of
their acknowledgements as owners (`tamto_cli.chaos.owners`: no two at once on one
partition) and that every storage node holds every entry at the end
(`tamto_cli.chaos.replicas`), and bounds each stall by the lease TTL plus a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import tamto_sdk
from tamto_cli.chaos.checker import STALL_BOUND_S, ChaosReport, Fault, check
from tamto_cli.chaos.network import (
    NETWORK_KINDS,
    inject_network,
    node_names,
    storage_addresses,
)
from tamto_cli.chaos.owners import overlaps, read_router_logs, tenures
from tamto_cli.chaos.replicas import whole_replicas
from tamto_common.health import grpc_healthy
from tamto_common.membership import connect_etcd, list_members
from tamto_local.cluster import (
    INFRA,
    MAX_NODES,
    SERVICES,
    ClusterConfig,
    LocalCluster,
    split_process,
)
from tamto_local.infra import tcp_open
from tamto_local.netlab import NetworkLab
from tamto_local.ports import free_port

STREAM = "chaos"
#: Every kind of process a fault can hit.
TARGETS = (*INFRA, *SERVICES)
KINDS = ("kill", "stop")
#: In the set of what is down while a network fault is in progress (one at a time).
NETWORK = "network"
#: How long a process may take to serve at the campaign's start: ten processes started
#: at once on a shared 2-core machine took over 60 s (a storage node's imports alone
#: 40 s at load 26).
START_LIMIT_S = 180.0
#: How long a fault may take to be over (its process serving, every client moving again).
RECOVERY_LIMIT_S = 60.0
#: How often a killed process is asked whether it serves again (each time over a new
#: channel: a channel kept open would back off between attempts). Its downtime is
#: therefore measured up to this much too long.
SERVING_POLL_S = 0.05


@dataclass(frozen=True)
class PlannedFault:
    """One fault of a fixed plan: `kind` ("kill" or "stop") on `target`; a stop lasts `pause_s`."""

    target: str
    kind: str
    pause_s: float = 2.0
    #: A delay fault's milliseconds each way.
    delay_ms: int = 0


@dataclass(frozen=True)
class ChaosOptions:
    """How long, how hard and at what a campaign hits."""

    duration_s: float = 60.0
    targets: tuple[str, ...] = TARGETS
    kinds: tuple[str, ...] = KINDS
    #: Range of a SIGSTOP's length, seconds.
    pause_s: tuple[float, float] = (0.5, 3.0)
    #: Range of the time between two random faults (which may overlap), seconds: 3 s on
    #: average, one fault every 3-4 s on a busy 2-core machine (the campaign's own event
    #: loop is busy too), 150-200 in 10 minutes. At 1-3 s the data path was down most
    #: of the time, restarts there taking 5-10 s.
    gap_s: tuple[float, float] = (2.0, 4.0)
    producers: int = 2
    #: Messages per second each producer offers (in chunks of `chunk`, each awaited).
    rate: int = 200
    chunk: int = 10
    partitions: int = 2
    seed: int | None = None
    lease_ttl_s: int = 5
    #: Fixed faults, in order, instead of random ones (then `duration_s` is a minimum).
    plan: Sequence[PlannedFault] | None = None
    #: Quiet time before the first fault, seconds.
    warmup_s: float = 2.0
    #: Storage nodes and routers (`tamto up --nodes`); a fault hits one process of a target.
    nodes: int = 1
    #: Each node in a network namespace, and network faults among `kinds` (see the module).
    network: bool = False
    #: Range of a network fault's length, seconds (some shorter than a lease, some longer).
    cut_s: tuple[float, float] = (1.0, 8.0)
    #: Range of a delay fault's milliseconds each way.
    delay_ms: tuple[int, int] = (20, 300)

    def __post_init__(self) -> None:
        unknown = set(self.targets) - set(TARGETS)
        if unknown or not self.targets:
            raise ValueError(f"targets must be some of {', '.join(TARGETS)}; got {self.targets}")
        allowed = (*KINDS, *NETWORK_KINDS) if self.network else KINDS
        if set(self.kinds) - set(allowed) or not self.kinds:
            raise ValueError(f"kinds must be some of {', '.join(allowed)}; got {self.kinds}")
        if self.network and self.nodes < 2:
            raise ValueError("network faults need a cluster: nodes must be 2 or more")
        if self.duration_s <= 0 or self.producers <= 0 or self.rate <= 0 or self.chunk <= 0:
            raise ValueError("duration, producers, rate and chunk must be positive")
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"nodes must be 1-{MAX_NODES}; got {self.nodes}")


@dataclass
class _Record:
    """What the clients saw, as it happened (monotonic seconds)."""

    progress: dict[str, list[float]] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)
    delivered: Counter[str] = field(default_factory=Counter)
    send_failures: int = 0
    faults: list[Fault] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.changed = asyncio.Event()

    def moved(self, client: str) -> None:
        self.progress.setdefault(client, []).append(time.monotonic())
        self.changed.set()

    async def until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `condition` holds after some client moved (False after `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        return True

    def all_moved_since(self, moment: float) -> bool:
        return all(m and m[-1] > moment for m in self.progress.values())


class _Logs:
    """Each process's output in `<dir>/<name>.log`."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._dir = directory
        self._files: dict[str, IO[str]] = {}

    def sink(self, name: str, line: str) -> None:
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = (self._dir / f"{name}.log").open("a", buffering=1)
        f.write(line + "\n")

    def close(self) -> None:
        for f in self._files.values():
            f.close()


async def run_campaign(
    options: ChaosOptions, data_dir: Path, say: Callable[[str], None] = lambda _: None
) -> ChaosReport:
    """Run one campaign in `data_dir` (a fresh directory) and return its report."""
    async with contextlib.AsyncExitStack() as stack:
        lab = None
        if options.network:
            lab = await stack.enter_async_context(NetworkLab(options.nodes))
            say(f"network lab: bridge {lab.bridge}, namespaces {', '.join(lab.namespaces)}")
        config = ClusterConfig(
            data_dir,
            host=lab.root_address if lab is not None else "127.0.0.1",
            gateway_port=free_port(),
            etcd_port=free_port(),
            etcd_peer_port=free_port(),
            nats_port=free_port(),
            lease_ttl_s=options.lease_ttl_s,
            nodes=options.nodes,
            placed=lab.placement() if lab is not None else {},
        )
        logs = _Logs(data_dir / "logs")
        record = _Record()
        cluster = LocalCluster(
            config, logs.sink, lambda m: logs.sink("launcher", m), ready_timeout_s=START_LIMIT_S
        )
        # SIGTERM ends the campaign as Ctrl-C does: the system is stopped, not orphaned.
        current = asyncio.current_task()
        assert current is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, current.cancel)
        try:
            await cluster.start()
            say(f"system up on {config.gateway_url}; data in {data_dir}")
            report = await _campaign(cluster, options, record, say, lab)
        finally:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
            await cluster.stop()
            logs.close()
    if not options.network:
        return report
    # The routers log an epoch's last ack as its log closes: read them once stopped.
    wall = time.time() - time.monotonic()
    kills: dict[str, list[float]] = {}
    for fault in record.faults:
        if fault.kind == "kill":
            kills.setdefault(fault.target, []).append(fault.at + wall)
    found = tenures(read_router_logs(data_dir / "logs"), kills, end=time.time())
    return dataclasses.replace(report, owner_epochs=len(found), owner_overlaps=overlaps(found))


async def _campaign(
    cluster: LocalCluster,
    options: ChaosOptions,
    record: _Record,
    say: Callable[[str], None],
    lab: NetworkLab | None,
) -> ChaosReport:
    url, key = cluster.config.gateway_url, cluster.credential
    stop = asyncio.Event()
    clients = [await tamto_sdk.connect(url, api_key=key) for _ in range(options.producers + 1)]
    tasks: list[asyncio.Task[None]] = []
    try:
        await clients[0].streams.ensure(STREAM, partitions=options.partitions)
        for i in range(options.producers):
            record.progress[f"producer-{i}"] = []
        record.progress["consumer"] = []
        tasks += [
            asyncio.create_task(_produce(clients[i], f"producer-{i}", options, record, stop))
            for i in range(options.producers)
        ]
        tasks.append(asyncio.create_task(_consume(clients[-1], record)))
        started = time.monotonic()
        await _wait_all_moved(record, started, tasks)
        await asyncio.sleep(options.warmup_s)
        await _hit(cluster, options, record, tasks, say, lab)
        duration = time.monotonic() - started
        if not await _all_registered(cluster):
            record.notes.append(f"not every service registered in etcd {RECOVERY_LIMIT_S} s on")
        stop.set()
        await asyncio.gather(*tasks[:-1])
        # The consumer drains what was acked before it stops.
        drained = await record.until(
            lambda: record.acked <= record.delivered.keys(), RECOVERY_LIMIT_S
        )
        if not drained:
            record.notes.append("the campaign's consumer did not receive every acked message")
        tasks[-1].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[-1]
        stored = await _read_back(clients[0], len(record.acked))
        replicas, replica_problems = 0, list[str]()
        if lab is not None:
            replicas, replica_problems = await whole_replicas(
                storage_addresses(cluster), STREAM, stored, options.partitions, RECOVERY_LIMIT_S
            )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()
    return check(
        duration_s=duration,
        faults=record.faults,
        progress=record.progress,
        acked=record.acked,
        delivered=record.delivered,
        read_back=Counter(stored.values()),
        send_failures=record.send_failures,
        notes=record.notes,
        stall_bound_s=options.lease_ttl_s + 1.0 if lab is not None else STALL_BOUND_S,
        replicas_checked=replicas,
        replica_problems=replica_problems,
    )


async def _wait_all_moved(record: _Record, since: float, tasks: list[asyncio.Task[None]]) -> bool:
    """Wait until every client progressed after `since` (False after `RECOVERY_LIMIT_S`)."""
    deadline = time.monotonic() + RECOVERY_LIMIT_S
    while not record.all_moved_since(since):
        if time.monotonic() > deadline:
            return False
        for task in tasks:
            if task.done():
                task.result()  # a client died: raise its error
        await asyncio.sleep(0.01)
    return True


async def _hit(
    cluster: LocalCluster,
    options: ChaosOptions,
    record: _Record,
    tasks: list[asyncio.Task[None]],
    say: Callable[[str], None],
    lab: NetworkLab | None = None,
) -> None:
    """A fixed plan: one fault at a time, each once every client moved again. Random:
    a fault every `gap_s` on a process that is not down already, so faults overlap
    (a kill's restart takes seconds) and `duration_s` holds enough of them."""
    if options.plan is not None:
        end = time.monotonic() + options.duration_s
        for fault in options.plan:
            hit = await _inject(cluster, fault, lab)
            record.faults.append(hit)
            await _after(record, hit, tasks, say)
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        return
    rng = random.Random(options.seed)
    # A network campaign draws its gaps apart, so the faults it draws (one network
    # fault at a time, drawn once the last is over) follow from the seed alone.
    gaps = (
        rng
        if not options.network
        else random.Random(None if options.seed is None else f"{options.seed}-gaps")
    )
    end = time.monotonic() + options.duration_s
    # Every process of a target service (one with a single node), in a fixed order.
    processes = [n for n in (*INFRA, *cluster.names) if split_process(n)[0] in options.targets]
    down: set[str] = set()
    running: set[asyncio.Task[None]] = set()

    async def one(fault: PlannedFault) -> None:
        try:
            hit = await _inject(cluster, fault, lab)
        finally:
            down.discard(fault.target)
            if fault.kind in NETWORK_KINDS:
                down.discard(NETWORK)
        record.faults.append(hit)
        say(f"fault {len(record.faults)}: {fault.kind} {fault.target}, down {hit.downtime_s:.2f} s")

    while time.monotonic() < end:
        await asyncio.sleep(gaps.uniform(*options.gap_s))
        for task in [t for t in running if t.done()]:
            running.discard(task)
            task.result()  # a process that did not come back ends the campaign
        drawn = _draw(rng, options, processes, down)
        if drawn is None or time.monotonic() >= end:
            continue
        down.add(drawn.target)
        if drawn.kind in NETWORK_KINDS:
            down.add(NETWORK)
        running.add(asyncio.create_task(one(drawn)))
    await asyncio.gather(*running)
    if record.faults:
        await _after(record, max(record.faults, key=lambda f: f.back), tasks, lambda _: None)


def _draw(
    rng: random.Random, options: ChaosOptions, processes: list[str], down: set[str]
) -> PlannedFault | None:
    """The next random fault: on a process (or with `network`, a node) not down already;
    None when there is none. A network campaign draws the kind first, and runs one
    network fault at a time (`NETWORK` in `down`: only process kinds are drawn)."""
    if not options.network:
        up = [t for t in processes if t not in down]
        if not up:
            return None
        return PlannedFault(
            rng.choice(up), rng.choice(options.kinds), rng.uniform(*options.pause_s)
        )
    kinds = [k for k in options.kinds if NETWORK not in down or k not in NETWORK_KINDS]
    if not kinds:
        return None
    kind = rng.choice(kinds)
    if kind in NETWORK_KINDS:
        target = rng.choice(node_names(options.nodes))
        return PlannedFault(
            target, kind, rng.uniform(*options.cut_s), rng.randint(*options.delay_ms)
        )
    up = [t for t in processes if t not in down]
    return PlannedFault(rng.choice(up), kind, rng.uniform(*options.pause_s)) if up else None


async def _after(
    record: _Record, hit: Fault, tasks: list[asyncio.Task[None]], say: Callable[[str], None]
) -> None:
    """Wait until every client moved after `hit` was over; note it if they did not."""
    if not await _wait_all_moved(record, hit.back, tasks):
        record.notes.append(f"clients did not all progress within {RECOVERY_LIMIT_S} s of {hit}")
    say(f"fault {len(record.faults)}: {hit.kind} {hit.target}, down {hit.downtime_s:.2f} s")


async def _inject(cluster: LocalCluster, fault: PlannedFault, lab: NetworkLab | None) -> Fault:
    """Do `fault` and return it with the moment its process was serving again (a
    network fault: the moment it was healed)."""
    if fault.kind in NETWORK_KINDS:
        if lab is None:
            raise ValueError(f"a {fault.kind} fault needs a network campaign")
        return await inject_network(
            lab, cluster, fault.target, fault.kind, fault.pause_s, fault.delay_ms
        )
    process = cluster.processes[fault.target]
    at = time.monotonic()
    if fault.kind == "stop":
        process.send(signal.SIGSTOP)
        try:
            await asyncio.sleep(fault.pause_s)
        finally:
            process.send(signal.SIGCONT)
        return Fault(fault.target, fault.kind, at, time.monotonic())
    process.send(signal.SIGKILL)
    deadline = at + RECOVERY_LIMIT_S
    while not await _serving_again(cluster, fault.target, process):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{fault.target} did not come back within {RECOVERY_LIMIT_S} s")
        await asyncio.sleep(SERVING_POLL_S)
    return Fault(fault.target, fault.kind, at, time.monotonic())


async def _all_registered(cluster: LocalCluster) -> bool:
    """Whether every service process is registered in etcd again, within `RECOVERY_LIMIT_S`."""
    wanted = Counter(split_process(n)[0] for n in cluster.names)
    etcd = await connect_etcd([(cluster.config.host, cluster.config.etcd_port)])
    try:
        deadline = time.monotonic() + RECOVERY_LIMIT_S
        while True:
            registered = Counter(m.service for m in await list_members(etcd))
            if all(registered[service] >= n for service, n in wanted.items()):
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)
    finally:
        await etcd.close()


async def _etcd_answers(host: str, port: int) -> bool:
    """Whether etcd answers a (linearizable) read within a second."""
    try:
        etcd = await connect_etcd([(host, port)], timeout_s=0.5)
    except Exception:
        return False
    try:
        await asyncio.wait_for(etcd.get(b"/tamto/"), 1.0)
        return True
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await etcd.close()


async def _serving_again(cluster: LocalCluster, name: str, old: object) -> bool:
    """Whether a new process of `name` (not `old`) answers: its health check, etcd a
    read (its port opens a second or more before it has a leader and answers), NATS
    its port."""
    process = cluster.processes[name]
    if process is old or not process.running():
        return False
    config = cluster.config
    if name == "etcd":
        return await _etcd_answers(config.host, config.etcd_port)
    if name == "nats":
        return await tcp_open(config.host, config.nats_port)
    host = config.placed.get(name, (config.host, ()))[0]
    try:
        return await grpc_healthy(f"{host}:{cluster.ports[name]}")
    except Exception:  # not serving yet
        return False


async def _produce(
    client: tamto_sdk.Client,
    name: str,
    options: ChaosOptions,
    record: _Record,
    stop: asyncio.Event,
) -> None:
    """Publish ids `<name>-<n>` in awaited chunks at `options.rate`; record every ack."""
    interval = options.chunk / options.rate
    seq = 0
    async with client.producer(STREAM, linger_s=0.002) as producer:
        next_at = time.monotonic()
        while not stop.is_set():
            ids = [f"{name}-{seq + k}" for k in range(options.chunk)]
            seq += options.chunk
            futures = [await producer.send(i.encode(), id=i) for i in ids]
            results = await asyncio.gather(*futures, return_exceptions=True)
            for message_id, result in zip(ids, results, strict=True):
                if isinstance(result, BaseException):
                    record.send_failures += 1
                else:
                    record.acked.add(message_id)
            if any(not isinstance(r, BaseException) for r in results):
                record.moved(name)
            next_at = max(next_at + interval, time.monotonic() - interval)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def _consume(client: tamto_sdk.Client, record: _Record) -> None:
    """Receive and ack on one subscription until cancelled; record every delivery. A
    consumer that gives up (its retry deadline spent) is noted, which fails the
    campaign, and replaced, so the campaign still measures the rest."""
    while True:
        try:
            async with client.consumer(STREAM, "chaos-live", credits=2000) as consumer:
                while True:
                    batch = await consumer.receive_batch(max_messages=1000, timeout_s=0.1)
                    if len(batch):
                        ids = batch.record_batch.column("id").to_pylist()
                        record.delivered.update(i for i in ids if i is not None)
                        consumer.ack(batch)
                        record.moved("consumer")
        except tamto_sdk.TamtoError as exc:
            record.notes.append(f"the consumer gave up: {exc!r}")


async def _read_back(client: tamto_sdk.Client, expected: int) -> dict[tuple[int, int], str]:
    """The id stored at each (partition, offset) of the stream."""
    stored: dict[tuple[int, int], str] = {}
    sub = f"chaos-check-{random.getrandbits(32):08x}"
    async with client.consumer(STREAM, sub, credits=10_000) as consumer:
        idle_until = time.monotonic() + 10.0
        while time.monotonic() < idle_until:
            batch = await consumer.receive_batch(max_messages=5000, timeout_s=0.5)
            if not len(batch):
                if len(stored) >= expected:
                    idle_until = min(idle_until, time.monotonic() + 1.0)
                continue
            ids = batch.record_batch.column("id").to_pylist()
            for offset, message_id in zip(batch.offset_list(), ids, strict=True):
                stored[(batch.partition, offset)] = message_id
            consumer.ack(batch)
            idle_until = time.monotonic() + 10.0
    return stored
