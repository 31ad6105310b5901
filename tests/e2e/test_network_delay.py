"""The delayed links: a router whose every link is slow keeps the cluster safe
and publishing goes on, slower.

The cluster of `test_network_partition.py` (three nodes, R = 3, Q = 2, `router-3` in a
network namespace of the test's own), with a publisher with message ids on every
partition. `Netns.delay()` delays all of router-3's TCP over its veth, each way: to
etcd, NATS, the other routers and the storage nodes, and the gateways' connections to
it (this machine has no tc netem: the delay proxy of `tamto_testing.delay_proxy`,
which resets router-3's open connections once so they reconnect through it). CI
delays by 100 ms (a round trip 0.2 s longer, well below the 3 s lease TTL);
TAMTO_LONG_TESTS=1 by 300 ms, then by 4 s (an 8 s round trip: router-3 cannot keep
its lease, so its partitions must move), with more messages. At 300 ms router-3 must
keep its lease through slow answers: its keep-alive waits twice as long after each
failure, up to the TTL, instead of giving up while etcd still renews the lease (which
would leave its partitions refused by router-3 and taken by no other router).

Checked, for each delay: every partition acknowledges messages while delayed and
again after the heal (publish latency on router-3's partitions and the others is
printed); then, as after a cut: each partition's ledgers form one chain, no offset was
acknowledged for two payloads, no offset holds two payloads on any storage node, each
acknowledged payload is at its offset on Q nodes or more, and a fresh subscription
reads every acknowledged message back.

Needs root and `ip`/`iptables`/`ss`; skipped, saying why, elsewhere.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import pytest

import tamto_sdk
from tamto_common.config import parse_endpoints
from tamto_common.membership import connect_etcd
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import running_infra
from tamto_testing.needs import needs
from tamto_testing.netns import Netns, unavailable
from tamto_testing.waiting import eventually, long_tests_enabled

from .test_network_partition import (
    ISOLATED,
    PARTITIONS,
    assert_nothing_lost,
    owners,
    start_traffic,
    stream_on,
    wait_placed,
)
from .test_replicated_failover import Traffic

pytestmark = [
    pytest.mark.e2e,
    needs(unavailable()),
]

#: Each way, in order. CI: 100 ms. Long runs: 300 ms (router-3 keeps its lease and its
#: partitions), then 4 s, above the 3 s lease TTL (its partitions move).
DELAYS_MS = [300, 4000] if long_tests_enabled() else [100]
#: Messages each partition gets before the first delay, during each and after each heal.
PER_PHASE = 20 if long_tests_enabled() else 10


async def flowing(traffic: Traffic, at_least: int, delay_s: float, what: str) -> None:
    """Wait until every partition acknowledged `at_least` messages more; each takes a
    few round trips of the delayed links, so the deadline grows with the delay."""
    target = {p: traffic.count(p) + at_least for p in traffic.keys}
    deadline = 90.0 + at_least * 6 * delay_s
    try:
        await eventually(
            lambda: all(traffic.count(p) >= n for p, n in target.items()), deadline, what
        )
    except AssertionError as exc:
        short = {p: f"{traffic.count(p)}/{n}" for p, n in target.items() if traffic.count(p) < n}
        raise AssertionError(f"{exc}; acknowledged/wanted: {short}") from None


def latencies(traffic: Traffic, partitions: list[int], since: float, until: float) -> list[float]:
    """Publish latencies (sent to acknowledged) of the messages sent on `partitions`
    between `since` and `until`."""
    return [
        acked_at - sent_at
        for p in partitions
        for _, _, sent_at, acked_at in traffic.acked.get(p, [])
        if since <= sent_at < until
    ]


def latency(traffic: Traffic, partitions: list[int], since: float, until: float) -> str:
    """Median and largest publish latency of `latencies`, as text."""
    seconds = latencies(traffic, partitions, since, until)
    if not seconds:
        return "none acknowledged"
    return f"median {statistics.median(seconds):.2f}s, max {max(seconds):.2f}s ({len(seconds)})"


@pytest.mark.timeout(900)  # about 3 minutes on a busy machine; more with TAMTO_LONG_TESTS=1
async def test_a_router_with_delayed_links_loses_nothing(tmp_path: Path) -> None:
    async with Netns() as ns:
        with running_infra(tmp_path / "infra", host=ns.root_address) as infra:
            cluster = TestCluster(tmp_path / "cluster", infra, nodes=3, host=ns.root_address)
            cluster.run_in(ISOLATED, ns.address, ns.argv_prefix)
            with cluster.running():
                report = await delay_heal_and_check(cluster, ns, infra.etcd_endpoint)
    print(f"\ndelayed links of {ISOLATED}, R=3 Q=2:\n{report}")


async def delay_heal_and_check(cluster: TestCluster, ns: Netns, etcd_endpoint: str) -> str:
    etcd = await connect_etcd(parse_endpoints(etcd_endpoint))
    isolated_id = cluster.instance_id(ISOLATED)
    stream, mine = stream_on(isolated_id, [cluster.instance_id(n) for n in cluster.routers()])
    others = [p for p in range(PARTITIONS) if p not in mine]
    lines: list[str] = []
    try:
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            traffic, workers = await start_traffic(client, stream)
            try:
                await wait_placed(etcd, stream, mine, isolated_id)
                started = time.monotonic()
                await flowing(traffic, PER_PHASE, 0.0, "traffic on every partition")
                lines.append(
                    f"undelayed: {ISOLATED}'s partitions {mine}: "
                    f"{latency(traffic, mine, started, time.monotonic())}; others: "
                    f"{latency(traffic, others, started, time.monotonic())}"
                )
                for ms in DELAYS_MS:
                    await ns.delay(ms)
                    delayed_at = time.monotonic()
                    what = f"traffic on every partition with {ms} ms delays"
                    await flowing(traffic, PER_PHASE, ms / 1000, what)
                    healed_at = time.monotonic()
                    now = await owners(etcd, stream)
                    moved = [p for p in mine if now.get(p) != isolated_id]
                    kept = [p for p in mine if p not in moved]
                    delayed = latencies(traffic, kept, delayed_at, healed_at)
                    # The delay is real: a publish to router-3 crosses its link both ways.
                    assert not delayed or statistics.median(delayed) >= 2 * ms / 1000, (
                        f"{ms} ms each way, yet router-3's publishes took a median "
                        f"{statistics.median(delayed):.3f}s"
                    )
                    await ns.heal()
                    await flowing(traffic, PER_PHASE, 0.0, f"traffic after healing {ms} ms")
                    lines.append(
                        f"{ms} ms each way for {healed_at - delayed_at:.1f}s: {ISOLATED}'s "
                        f"partitions {mine}: {latency(traffic, mine, delayed_at, healed_at)}; "
                        f"others: {latency(traffic, others, delayed_at, healed_at)}; "
                        f"of router-3's, owned by another router at the heal: {moved or 'none'}"
                    )
            finally:
                traffic.stop.set()
                await asyncio.gather(*workers)
        read_s = await assert_nothing_lost(cluster, etcd, stream, traffic)
    finally:
        await etcd.close()
    lines.append(
        f"{len(set(traffic.payloads()))} acked, {len(traffic.failed)} publishes failed; a fresh subscription "
        f"read everything back in {read_s:.1f}s"
    )
    return "\n".join(lines)
