"""Load balancing moves a partition off a busy router.

Two routers (and one storage node: the routers are what is balanced); they report their load every 0.5 s and the balancer's
bounds are lowered so the test's traffic passes them (min load 20 messages/s,
threshold 2, cool-down 2 s). A producer publishes, with ids, only to the
partitions the ring gives the first router. The elected balancer must move one
of them to the idle router (a move recorded in `/tamto/placement/moves/`, then
the owner key changes), while publishing goes on; afterwards a fresh
subscription reads back every acknowledged message (publishes that failed
are counted and printed, not checked).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aetcd
import pytest

import tamto_sdk
from tamto_common.config import parse_endpoints
from tamto_common.membership import connect_etcd
from tamto_common.placement import Placement, read_placement
from tamto_protocol.partitioning import partition_for_key
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually
from tests.e2e.test_planned_moves import owners, read_all

pytestmark = pytest.mark.e2e

PARTITIONS = 6
ROUTER_ENV = {
    "TAMTO_ROUTER_LOAD_REPORT_INTERVAL_S": "0.5",
    "TAMTO_ROUTER_BALANCE_MIN_LOAD": "20",
    "TAMTO_ROUTER_BALANCE_THRESHOLD": "2",
    "TAMTO_ROUTER_BALANCE_COOLDOWN_S": "2",
}


def keys_for(partitions: set[int]) -> dict[int, bytes]:
    """One key that hashes to each of `partitions`."""
    found: dict[int, bytes] = {}
    i = 0
    while len(found) < len(partitions):
        key = f"k{i}".encode()
        p = partition_for_key(key, PARTITIONS)
        if p in partitions:
            found.setdefault(p, key)
        i += 1
    return found


def hot_stream(routers: list[str]) -> tuple[str, str, set[int]]:
    """A stream whose partitions the ring puts at least two of on one router: its name,
    that router and those partitions."""
    while True:
        stream = f"hot-{uuid.uuid4().hex[:8]}"
        busy = Placement().owner(routers, stream, 0)
        hot = {p for p in range(PARTITIONS) if Placement().owner(routers, stream, p) == busy}
        if len(hot) >= 2:
            return stream, busy, hot


@dataclass
class HotTraffic:
    """A producer publishing, with ids, ten messages at a time to each of `keys`'
    partitions until `stop`; what was acknowledged, and what failed, why."""

    stream: str
    keys: dict[int, bytes]
    acked: list[bytes] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def produce(self, client: tamto_sdk.Client) -> None:
        async with client.producer(self.stream) as producer:
            n = 0
            while not self.stop.is_set():
                futures = []
                for p, key in self.keys.items():
                    for _ in range(10):
                        payload = f"{p}-{n}".encode()
                        n += 1
                        future = await producer.send(payload, key=key, id=payload.decode())
                        futures.append((payload, future))
                for payload, future in futures:
                    try:
                        await future
                    except tamto_sdk.TamtoError as exc:
                        # Not acknowledged: the checker does not count it. A
                        # publish in flight at the hand-back may fail or time out.
                        self.failed.append(f"{payload.decode()}: {type(exc).__name__}: {exc}")
                        continue
                    self.acked.append(payload)


@pytest.mark.timeout(600)
async def test_the_balancer_moves_a_hot_partition_to_the_idle_router(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    cluster = TestCluster(tmp_path / "cluster", tamto_infra, nodes=2)
    routers = [cluster.instance_id(name) for name in cluster.routers()]
    stream, busy, hot = hot_stream(routers)
    idle = next(r for r in routers if r != busy)
    traffic = HotTraffic(stream, keys_for(hot))
    etcd = await connect_etcd(parse_endpoints(tamto_infra.etcd_endpoint))
    try:
        # One storage node and one gateway are enough: two routers is what is tested.
        cluster.start_together(["auth", "storage", "router", "router-2"], {"router": ROUTER_ENV})
        cluster.start("gateway")
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            await client.streams.ensure(stream, partitions=PARTITIONS)
            producing = asyncio.create_task(traffic.produce(client))
            try:
                await wait_moved_to_idle(etcd, traffic, hot, idle)
            finally:
                traffic.stop.set()
                await producing
            acked, failed = traffic.acked, traffic.failed
            got = await read_all(client, stream, len(acked), frozenset(acked))
            print(f"{len(acked)} acknowledged, {len(failed)} failed: {failed[:3]}")
    finally:
        cluster.stop_all()
        await etcd.close()
    missing = set(acked) - set(got)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    # A publish in flight when its partition was handed back is answered then (stored
    # or a retriable error the SDK retries), never left to the SDK's 30 s deadline.
    unanswered = [f for f in failed if ": Timeout: " in f]
    assert not unanswered, f"publishes unanswered until the SDK's deadline: {unanswered[:3]}"
    log = (cluster.workdir / "logs").glob("router*.log")
    assert any("load balancing moved a partition" in f.read_text(errors="replace") for f in log)


async def wait_moved_to_idle(
    etcd: aetcd.Client, traffic: HotTraffic, hot: set[int], idle: str
) -> None:
    """Wait until the balancer moved one of the `hot` partitions to the `idle` router,
    that router claimed it, and publishing went on after."""
    stream = traffic.stream

    async def moved() -> bool:
        placement = await read_placement(etcd)
        return any(
            s == stream and p in hot and target == idle
            for (s, p), target in placement.moves.items()
        )

    await eventually(moved, 90, "the balancer to move a hot partition")
    (moved_partition,) = [p for (s, p) in (await read_placement(etcd)).moves if s == stream]

    async def on_idle() -> bool:
        return (await owners(etcd, stream)).get(moved_partition) == idle

    await eventually(on_idle, 60, "the moved partition's new owner to claim it")
    mark = len(traffic.acked)
    # Generous for a loaded machine; the move itself leaves no publish waiting
    # (checked by the caller).
    await eventually(lambda: len(traffic.acked) > mark + 100, 180, "publishes after the move")
