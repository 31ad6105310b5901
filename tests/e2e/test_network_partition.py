"""The partition acceptance: a router cut off from etcd, its peers and the
storage nodes by a network partition stops acknowledging before another router
can own its partitions, and no offset is ever written twice with different data.

A three-node cluster with R = 3, Q = 2; `router-3` runs in a network namespace of
the test's own (`tamto_testing.netns`), everything else in the root namespace on
the root end of its veth (etcd and NATS too: a pair of this test's, since the
session's listen on 127.0.0.1, which the namespace cannot reach). The cut drops
router-3's connections to etcd, NATS and the other routers (in CI; the storage nodes
stay reachable, so only its own lease check keeps it from appending), or to the
storage nodes too (TAMTO_LONG_TESTS=1), but never the gateways' connections to it:
producers keep reaching the cut-off router through their gateway.

Checked, with traffic on every partition router-3 owned:
- every message first sent after the cut and acknowledged at an offset of
  router-3's last ledger (only router-3 wrote those) was acknowledged before
  another router claimed the partition: before the last read of its owner key
  (every 20 ms) that still named router-3 started;
- each partition accepts publishes again on another router (time measured);
- after healing the link router-3 registers again, and each partition's ledgers
  still form one chain (epochs rising, ranges contiguous, one open at most): no
  split brain;
- the checker reads every replica on every storage node: no offset holds two
  different payloads, each acknowledged payload is at its offset on at least Q
  nodes, and a fresh subscription reads every acknowledged message back.

Needs root and `ip`/`iptables`; skipped, saying why, elsewhere.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

import aetcd
import pytest

import tamto_sdk
from tamto_common.channels import ChannelPool
from tamto_common.config import parse_endpoints
from tamto_common.ledgers import Ledger, read_ledgers
from tamto_common.membership import connect_etcd, list_members
from tamto_common.ring import HashRing, partition_key
from tamto_protocol.batch import decode_batch
from tamto_router.ownership import OWNERS
from tamto_router.storage_client import StorageClient
from tamto_sdk import StreamConfig
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra, running_infra
from tamto_testing.needs import needs
from tamto_testing.netns import Netns, unavailable
from tamto_testing.waiting import eventually, long_tests_enabled

from .test_replicated_failover import Traffic, keys_by_partition

pytestmark = [
    pytest.mark.e2e,
    needs(unavailable()),
]

PARTITIONS = 6
ISOLATED = "router-3"
#: Messages each partition gets before the cut and after the heal.
BETWEEN_FAULTS = 300 if long_tests_enabled() else 15
#: How long the final read-back may take before what it has not read counts as lost.
READ_BACK_S = 120.0
#: How often the test reads the owner keys to see a claim.
CLAIM_POLL_S = 0.02


async def flowing(traffic: Traffic, at_least: int, what: str) -> None:
    """Wait until every partition acknowledged `at_least` messages more."""
    target = {p: traffic.count(p) + at_least for p in traffic.keys}
    await eventually(lambda: all(traffic.count(p) >= n for p, n in target.items()), 60.0, what)


def stream_on(router: str, routers: list[str]) -> tuple[str, list[int]]:
    """A fresh stream name of which `router` owns two partitions or more on the ring
    of `routers` (a random name may give it none: the test would have nothing to
    cut), and those partitions."""
    ring = HashRing(routers)
    for _ in range(1000):
        stream = f"partition-{secrets.token_hex(3)}"
        mine = [p for p in range(PARTITIONS) if ring.owner(partition_key(stream, p)) == router]
        if len(mine) >= 2:
            return stream, mine
    raise AssertionError(f"no stream name in 1000 gives {router} two partitions")


async def owners(etcd: aetcd.Client, stream: str) -> dict[int, str]:
    """The owner instance id of each partition that has one."""
    found: dict[int, str] = {}
    for p in range(PARTITIONS):
        kv = await etcd.get(f"{OWNERS}{stream}/{p}".encode())
        if kv is not None:
            found[p] = json.loads(kv.value)["owner"]
    return found


#: What the cut drops: router-3's connections to etcd, NATS and the other routers
#: (storage still reachable: only its lease keeps it from appending: the acceptance's
#: case), or to the storage nodes as well (long runs: appends in flight at the cut
#: reach some replicas only).
CUTS = {
    "etcd-nats-peers": ("etcd", "nats", "routers"),
    "everything": ("etcd", "nats", "routers", "storage"),
}


@pytest.mark.timeout(900)  # about 3 minutes on a busy machine; more with TAMTO_LONG_TESTS=1
@pytest.mark.parametrize(
    "cut",
    [
        "etcd-nats-peers",
        pytest.param(
            "everything",
            marks=pytest.mark.skipif(
                not long_tests_enabled(), reason="the full cut runs with TAMTO_LONG_TESTS=1"
            ),
        ),
    ],
)
async def test_a_cut_off_router_stops_acking_before_another_owns_its_partitions(
    tmp_path: Path, cut: str
) -> None:
    async with Netns() as ns:
        with running_infra(tmp_path / "infra", host=ns.root_address) as infra:
            cluster = TestCluster(tmp_path / "cluster", infra, nodes=3, host=ns.root_address)
            cluster.run_in(ISOLATED, ns.address, ns.argv_prefix)
            with cluster.running():
                etcd = await connect_etcd(parse_endpoints(infra.etcd_endpoint))
                try:
                    report = await cut_heal_and_check(cluster, infra, ns, etcd, CUTS[cut])
                finally:
                    await etcd.close()
    print(f"\nnetwork partition of {ISOLATED} ({cut}), R=3 Q=2: {report}")


def cut_ports(cluster: TestCluster, infra: Infra, what: tuple[str, ...]) -> list[int]:
    """The root-namespace ports router-3 loses: etcd, NATS, routers and/or storage."""
    ports: list[int] = []
    if "etcd" in what:
        ports.append(int(infra.etcd_endpoint.rsplit(":", 1)[1]))
    if "nats" in what:
        ports.append(int(infra.nats_url.rsplit(":", 1)[1]))
    if "routers" in what:
        ports += [cluster.ports[n] for n in cluster.routers() if n != ISOLATED]
    if "storage" in what:
        ports += [cluster.ports[n] for n in cluster.storages()]
    return ports


async def cut_heal_and_check(
    cluster: TestCluster, infra: Infra, ns: Netns, etcd: aetcd.Client, what: tuple[str, ...]
) -> str:
    isolated_id = cluster.instance_id(ISOLATED)
    stream, mine = stream_on(isolated_id, [cluster.instance_id(n) for n in cluster.routers()])
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        traffic, workers = await start_traffic(client, stream)
        try:
            await wait_placed(etcd, stream, mine, isolated_id)
            await flowing(traffic, BETWEEN_FAULTS, "traffic on every partition")
            old_ledgers = await open_ledgers(etcd, stream, mine)
            claimed_after, cut_at = await cut_until_claimed(
                ns, cut_ports(cluster, infra, what), etcd, stream, mine, isolated_id
            )
            await wait_back(etcd, traffic, mine, old_ledgers)
            recovered_at = time.monotonic()
            stopped = await check_acks_stopped_before_the_claims(
                etcd, traffic, old_ledgers, cut_at, claimed_after
            )
            # The new owners keep serving while the partition lasts.
            await flowing(traffic, BETWEEN_FAULTS, "traffic on every partition while cut")
            rejoined_s = await heal_and_rejoin(ns, etcd, isolated_id)
            await flowing(traffic, BETWEEN_FAULTS, "traffic on every partition after the heal")
        finally:
            traffic.stop.set()
            await asyncio.gather(*workers)

    read_s = await assert_nothing_lost(cluster, etcd, stream, traffic)
    acked = set(traffic.payloads())
    claim_s = ", ".join(f"p{p} +{claimed_after[p] - cut_at:.2f}s" for p in mine)
    stop_s = ", ".join(f"p{p} +{stopped[p]:.2f}s" for p in mine)
    return (
        f"{len(acked)} acked, {len(traffic.failed)} publishes failed; partitions {mine} on "
        f"{ISOLATED}: last ack from it after the cut {stop_s}; claimed after {claim_s}; "
        "all accepting again "
        f"+{recovered_at - cut_at:.2f}s after the cut; registered again {rejoined_s:.2f}s "
        f"after the heal; a fresh subscription read everything back in {read_s:.1f}s"
    )


async def open_ledgers(etcd: aetcd.Client, stream: str, partitions: list[int]) -> dict[int, Ledger]:
    """The current ledger of each of `partitions`, each open."""
    found: dict[int, Ledger] = {}
    for p in partitions:
        current = (await read_ledgers(etcd, stream, p)).current
        assert current is not None
        assert current.is_open
        found[p] = current
    return found


async def cut_until_claimed(
    ns: Netns, ports: list[int], etcd: aetcd.Client, stream: str, mine: list[int], owner: str
) -> tuple[dict[int, float], float]:
    """Cut `ports` off and wait until another router claimed each of `mine`: partition
    → the claim's earliest moment (`watch_claims`), and when the cut was in place."""
    claimed_after: dict[int, float] = {}
    watcher = asyncio.create_task(watch_claims(etcd, stream, mine, owner, claimed_after))
    await ns.cut(ports)
    # From here on every rule is in place (installing them takes a while: a
    # message sent meanwhile may still have reached the replicas).
    cut_at = time.monotonic()
    try:
        await eventually(
            lambda: len(claimed_after) == len(mine), 60.0, "another router claims them"
        )
    finally:
        watcher.cancel()
    return claimed_after, cut_at


async def wait_back(
    etcd: aetcd.Client, traffic: Traffic, mine: list[int], old_ledgers: dict[int, Ledger]
) -> None:
    """Wait until each partition accepts publishes again, on its new owner's ledger."""

    async def back() -> bool:
        for p in mine:
            ledgers = (await read_ledgers(etcd, traffic.stream, p)).ledgers
            newer = [x for x in ledgers if x.epoch > old_ledgers[p].epoch]
            if not newer or not any(newer[0].holds(row[1]) for row in traffic.acked[p]):
                return False
        return True

    await eventually(back, 60.0, f"{ISOLATED}'s partitions accept publishes again")


async def check_acks_stopped_before_the_claims(
    etcd: aetcd.Client,
    traffic: Traffic,
    old_ledgers: dict[int, Ledger],
    cut_at: float,
    claimed_after: dict[int, float],
) -> dict[int, float]:
    """The acceptance: the isolated router's old ledger of each partition is closed and
    it acknowledged nothing once another router could own the partition; partition →
    seconds from the cut to its last acknowledgement."""
    stopped: dict[int, float] = {}
    for p, old_ledger in old_ledgers.items():
        ledgers = (await read_ledgers(etcd, traffic.stream, p)).ledgers
        (old,) = [x for x in ledgers if x.epoch == old_ledger.epoch]
        assert old.state == "closed"
        # Only router-3 appends to its ledger, and the new owner's recovery
        # copies only what is there: a message first sent after the cut and
        # acknowledged at an offset of that ledger was acknowledged by router-3
        # (one sent before may be a retry the new owner answered from dedup).
        late = [
            (offset, acked_at)
            for _, offset, sent_at, acked_at in traffic.acked[p]
            if sent_at > cut_at and old.holds(offset)
        ]
        stopped[p] = max((acked_at for _, acked_at in late), default=cut_at) - cut_at
        # Router-3 acknowledged nothing once another router could own the
        # partition (its claim came after the last poll that did not see it).
        for offset, acked_at in late:
            assert acked_at < claimed_after[p], (
                f"partition {p}: {ISOLATED} acknowledged offset {offset} at "
                f"+{acked_at - cut_at:.3f}s, after the claim (not before "
                f"+{claimed_after[p] - cut_at:.3f}s)"
            )
    return stopped


async def heal_and_rejoin(ns: Netns, etcd: aetcd.Client, isolated_id: str) -> float:
    """Heal: the isolated router registers again; the seconds that took."""
    healed_at = time.monotonic()
    await ns.heal()

    async def registered() -> bool:
        return isolated_id in {m.instance_id for m in await list_members(etcd, "router")}

    await eventually(registered, 60.0, f"{ISOLATED} registered again after the heal")
    return time.monotonic() - healed_at


async def start_traffic(
    client: tamto_sdk.Client, stream: str
) -> tuple[Traffic, list[asyncio.Task[None]]]:
    """Create `stream` (PARTITIONS, R = 3, Q = 2) and start a publisher with message
    ids on each partition; stop them with `traffic.stop` and gather the tasks."""
    await client.streams.ensure(
        stream,
        partitions=PARTITIONS,
        config=StreamConfig(replication_factor=3, ack_quorum=2),
    )
    traffic = Traffic(stream, await keys_by_partition(client, stream, PARTITIONS))
    workers = [
        asyncio.create_task(traffic.run(client, p), name=f"traffic-{p}") for p in range(PARTITIONS)
    ]
    return traffic, workers


async def wait_placed(etcd: aetcd.Client, stream: str, partitions: list[int], owner: str) -> None:
    """Wait until `owner` (an instance id) owns each of `partitions` (a partition is
    claimed on its first publish)."""

    async def placed() -> bool:
        now = await owners(etcd, stream)
        return all(now.get(p) == owner for p in partitions)

    await eventually(placed, 60.0, f"{owner} owns its ring share {partitions}")


async def assert_nothing_lost(
    cluster: TestCluster, etcd: aetcd.Client, stream: str, traffic: Traffic
) -> float:
    """The checkers, once the traffic stopped: each partition's ledgers form one chain,
    no offset was acknowledged for two payloads or is stored with two, each
    acknowledged payload is on Q nodes or more, and a fresh subscription reads every
    acknowledged message back; the seconds that read-back took."""
    for p in range(PARTITIONS):
        assert_one_chain((await read_ledgers(etcd, stream, p)).ledgers, p)
    assert_no_offset_acked_twice(traffic)
    await assert_replicas_agree(cluster, stream, traffic)
    read_s, lost = await read_back(cluster, stream, set(traffic.payloads()))
    assert not lost, (
        f"{len(lost)} acknowledged messages not read back by a fresh subscription in "
        f"{read_s:.0f}s (each is on 2 replicas or more, checked above), e.g. {sorted(lost)[:5]}"
    )
    return read_s


async def watch_claims(
    etcd: aetcd.Client, stream: str, partitions: list[int], old: str, seen: dict[int, float]
) -> None:
    """Record, for each partition claimed by someone other than `old`, a time the claim
    came after: when the last read that still found `old` started."""
    last_old = dict.fromkeys(partitions, time.monotonic())
    while len(seen) < len(partitions):
        started = time.monotonic()
        now = await owners(etcd, stream)
        for p in partitions:
            if p in seen:
                continue
            if now.get(p, old) == old:
                last_old[p] = started
            else:
                seen[p] = last_old[p]
        await asyncio.sleep(CLAIM_POLL_S)


async def read_back(
    cluster: TestCluster, stream: str, acked: set[bytes]
) -> tuple[float, set[bytes]]:
    """The checker's last part: a new subscription reads the stream from its start until
    every acknowledged payload came or READ_BACK_S passed; the seconds it took and the
    payloads that did not come. Patient on purpose: a delivery that stalls a while
    (as on a loaded machine) is slow, not lost."""
    missing = set(acked)
    started = time.monotonic()
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        async with client.consumer(stream, "checker") as consumer:
            while missing and time.monotonic() - started < READ_BACK_S:
                batch = await consumer.receive_batch(max_messages=1000, timeout_s=5)
                if len(batch):
                    missing -= {m.payload for m in batch}
                    consumer.ack(batch)
    return time.monotonic() - started, missing


def assert_one_chain(ledgers: Sequence[Ledger], partition: int) -> None:
    """No split brain in etcd: epochs rise, each ledger starts after the previous
    one's end, and only the last may be open."""
    for older, newer in itertools.pairwise(ledgers):
        assert newer.epoch > older.epoch, (partition, ledgers)
        assert older.state == "closed", (partition, ledgers)
        assert older.last_offset is not None, (partition, ledgers)
        assert newer.first_offset == older.last_offset + 1, (partition, ledgers)


def assert_no_offset_acked_twice(traffic: Traffic) -> None:
    for p, rows in traffic.acked.items():
        by_offset: dict[int, bytes] = {}
        for payload, offset, _, _ in rows:
            assert by_offset.setdefault(offset, payload) == payload, (
                f"partition {p} offset {offset} acknowledged for "
                f"{by_offset[offset]!r} and {payload!r}"
            )


async def assert_replicas_agree(cluster: TestCluster, stream: str, traffic: Traffic) -> None:
    """The checker: read every partition from every storage node; no offset may hold
    two payloads, and each acknowledged payload is at its offset on Q nodes or more."""
    channels = ChannelPool()
    stored: dict[int, dict[int, dict[str, bytes]]] = {p: {} for p in range(PARTITIONS)}
    try:
        for node in cluster.storages():
            storage = StorageClient(channels.get(cluster.address(node)))
            try:
                for p in range(PARTITIONS):
                    for offset, payload in await read_everything(storage, stream, p):
                        stored[p].setdefault(offset, {})[node] = payload
            finally:
                await storage.close()
    finally:
        await channels.close()
    for p, offsets in stored.items():
        for offset, by_node in offsets.items():
            assert len(set(by_node.values())) == 1, f"partition {p} offset {offset}: {by_node}"
        for payload, offset, _, _ in traffic.acked.get(p, []):
            holders = [n for n, data in offsets.get(offset, {}).items() if data == payload]
            assert len(holders) >= 2, f"partition {p}: {payload!r} at {offset} on {holders}"


async def read_everything(storage: StorageClient, stream: str, p: int) -> list[tuple[int, bytes]]:
    """(offset, payload) of every entry the node holds of partition p, segments then WAL."""
    found: list[tuple[int, bytes]] = []
    offset = 0
    for _ in range(100_000):
        batches, next_offset = await storage.read(stream, p, offset, 1000, from_cache=False)
        if next_offset <= offset:
            return found
        for batch in batches:
            payloads = decode_batch(batch.arrow_ipc).column("payload").to_pylist()
            found += [
                (batch.base_offset + i, payload)
                for i, payload in enumerate(payloads)
                if batch.base_offset + i >= offset
            ]
        offset = next_offset
    raise AssertionError(f"partition {p}: no end after 100,000 reads")
