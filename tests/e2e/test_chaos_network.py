"""The network fault campaign (`tamto chaos --network`): cuts and delays between the
nodes of a three-node cluster with R = 3, Q = 2.

Each node's storage node and router run in a network namespace of the campaign's
(`tamto_local.netlab`: veth pairs on a bridge; delays through the delaying proxy,
this kernel having no sch_netem). Faults, one at a time on a random node: isolated
from everything, split from the other nodes and etcd/NATS (the gateways still reach
it), cut one way towards the next node, or delayed. Checked
(`tamto_cli.chaos.checker`, `owners`, `replicas`): nothing acknowledged lost,
nothing stored twice, no two routers acknowledging one partition at once (from the
routers' own records of each epoch's first and last ack), every storage node
holding every entry at the end, and no client stalling longer than the lease TTL
plus a second beyond the faults it waited out.

CI runs a short campaign of a fixed seed (about a minute of faults), with the stall
bound loosened by `CI_STALL_SLACK_S` for a loaded shared machine; TAMTO_LONG_TESTS=1
runs the 10-minute campaign with a new seed (printed) and the exact bound
(docs/testing.md). Needs root and `ip`/`iptables`/`ss`: skipped elsewhere, failed
under CI=true.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tamto_cli.chaos.campaign import run_campaign
from tamto_cli.chaos.checker import render
from tamto_cli.chaos.network import NETWORK_KINDS
from tamto_cli.chaos.options import ChaosOptions
from tamto_local.netlab import unavailable
from tamto_testing.needs import needs
from tamto_testing.waiting import long_tests_enabled

pytestmark = [pytest.mark.e2e, needs(unavailable())]

LEASE_TTL_S = 3
#: Enough partitions that every router owns some (a cut of a router owning none moves
#: no partition).
PARTITIONS = 6
#: The short campaign's seed, so CI draws the same faults each run.
CI_SEED = 1
#: What CI adds to the TTL + 1 s stall bound: on a loaded shared 2-core machine a
#: stall includes its contention (the long run holds the exact bound).
CI_STALL_SLACK_S = 2.0


@pytest.mark.timeout(1800)
async def test_a_network_fault_campaign_loses_nothing_and_never_has_two_owners(
    tmp_path: Path,
) -> None:
    long = long_tests_enabled()
    seed = random.randrange(1 << 32) if long else CI_SEED
    options = ChaosOptions(
        duration_s=600 if long else 45,
        seed=seed,
        lease_ttl_s=LEASE_TTL_S,
        nodes=3,
        partitions=PARTITIONS,
        network=True,
        kinds=NETWORK_KINDS,
        targets=("storage", "router"),
    )
    report = await run_campaign(options, tmp_path / "system")
    text = f"seed {seed}\n{render(report)}"
    print(text)
    assert report.acked > 0, text
    assert not report.lost, text
    assert not report.stored_twice, text
    assert not report.notes, text
    assert report.owner_epochs > 0, text  # the routers' records were found
    assert not report.owner_overlaps, text
    assert report.replicas_checked == 3 * PARTITIONS, text
    assert not report.replica_problems, text
    bound = LEASE_TTL_S + 1.0 + (0.0 if long else CI_STALL_SLACK_S)
    assert report.longest_stall_s <= bound, text
    kinds = {o.fault.kind for o in report.faults}
    assert kinds == set(NETWORK_KINDS), f"faults were only {sorted(kinds)} (seed {seed})"
