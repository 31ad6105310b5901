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

This module starts the system, runs the clients (`tamto_cli.chaos.clients`) and
the faults (`tamto_cli.chaos.faults`) against it, and stops it; the options are
`tamto_cli.chaos.options`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO

import tamto_sdk
from tamto_cli.chaos.checker import STALL_BOUND_S, ChaosReport, check
from tamto_cli.chaos.clients import STREAM, Record, consume, produce, read_back, wait_all_moved
from tamto_cli.chaos.faults import run_faults
from tamto_cli.chaos.network import storage_addresses
from tamto_cli.chaos.options import RECOVERY_LIMIT_S, ChaosOptions
from tamto_cli.chaos.owners import overlaps, read_router_logs, tenures
from tamto_cli.chaos.replicas import catch_up_log, whole_replicas
from tamto_common.membership import connect_etcd, list_members
from tamto_local.cluster import ClusterConfig, LocalCluster
from tamto_local.layout import split_process
from tamto_local.netlab import NetworkLab
from tamto_local.ports import free_port

#: How long a process may take to serve at the campaign's start: ten processes started
#: at once on a shared 2-core machine took over 60 s (a storage node's imports alone
#: 40 s at load 26).
START_LIMIT_S = 180.0


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
        record = Record()
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
    router_logs = read_router_logs(data_dir / "logs")
    found = tenures(router_logs, kills, end=time.time())
    notes = report.notes
    if report.replica_problems:  # what the routers last said of catching those up
        why = catch_up_log(router_logs, report.replica_problems, STREAM)
        notes = [*notes, *(f"router log: {line}" for line in why)]
    return dataclasses.replace(
        report, owner_epochs=len(found), owner_overlaps=overlaps(found), notes=notes
    )


async def _campaign(
    cluster: LocalCluster,
    options: ChaosOptions,
    record: Record,
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
            asyncio.create_task(produce(clients[i], f"producer-{i}", options, record, stop))
            for i in range(options.producers)
        ]
        tasks.append(asyncio.create_task(consume(clients[-1], record)))
        started = time.monotonic()
        await wait_all_moved(record, started, tasks)
        await asyncio.sleep(options.warmup_s)
        await run_faults(cluster, options, record, tasks, say, lab)
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
        stored = await read_back(clients[0], len(record.acked))
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
