"""The campaign's faults: a fixed plan or a random schedule, each fault done to a
process (or, in a network campaign, a node) and timed until it is over.

Split from `tamto_cli.chaos.campaign` (which runs a campaign) so that choosing,
doing and timing faults stands apart from the clients the faults are measured
by (`tamto_cli.chaos.clients`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Callable

from tamto_cli.chaos.checker import Fault
from tamto_cli.chaos.clients import Record, wait_all_moved
from tamto_cli.chaos.network import NETWORK_KINDS, inject_network, node_names
from tamto_cli.chaos.options import RECOVERY_LIMIT_S, ChaosOptions, PlannedFault
from tamto_common.health import grpc_healthy
from tamto_common.membership import connect_etcd
from tamto_local.cluster import INFRA, LocalCluster
from tamto_local.infra import tcp_open
from tamto_local.layout import split_process
from tamto_local.netlab import NetworkLab

#: In the set of what is down while a network fault is in progress (one at a time).
NETWORK = "network"
#: How often a killed process is asked whether it serves again (each time over a new
#: channel: a channel kept open would back off between attempts). Its downtime is
#: therefore measured up to this much too long.
SERVING_POLL_S = 0.05


async def run_faults(
    cluster: LocalCluster,
    options: ChaosOptions,
    record: Record,
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
    record: Record, hit: Fault, tasks: list[asyncio.Task[None]], say: Callable[[str], None]
) -> None:
    """Wait until every client moved after `hit` was over; note it if they did not."""
    if not await wait_all_moved(record, hit.back, tasks):
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
