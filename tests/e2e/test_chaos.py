"""Fault campaigns against a whole local system (Deliver 2 and 5).

A random campaign (kill -9 and SIGSTOP/SIGCONT of every service, etcd and
nats-server) and the etcd and NATS outages each run through
`tamto_cli.chaos.campaign`: producers publish with ids, a consumer acks, and the
checker asserts that nothing acknowledged was lost, nothing was stored twice,
and no client stalled more than 1 s beyond the downtime it waited out.

CI runs a short random campaign of a fixed seed and asserts 3 s stalls (a loaded
shared machine); TAMTO_LONG_TESTS=1 runs the 10-minute one of the acceptance, with
the 1 s bound (docs/testing.md).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tamto_cli.chaos.campaign import run_campaign
from tamto_cli.chaos.checker import STALL_BOUND_S, ChaosReport, render
from tamto_cli.chaos.options import ChaosOptions, PlannedFault
from tamto_testing.waiting import long_tests_enabled

pytestmark = pytest.mark.e2e

LEASE_TTL_S = 5
#: The stall bound the short random CI campaign holds: faults overlap on a loaded
#: 2-core machine (a killed service takes 5-12 s to serve again there, and stalls grow
#: with the overlaps, docs/recovery.md), so CI guards against regressions at 3 s
#: (once tens of seconds) while the long run and `tamto chaos` hold 1 s.
CI_STALL_BOUND_S = 3.0
#: The short campaign's seed, so CI draws the same faults each run (their overlaps
#: still follow timing): its first three hit router, gateway and storage whichever of
#: them is still down. TAMTO_LONG_TESTS=1 draws a new seed each run (printed).
CI_SEED = 3


def stall_bound_s() -> float:
    """The acceptance's 1 s with TAMTO_LONG_TESTS=1; CI's looser regression bound
    otherwise (a stall measured on a loaded shared machine includes its contention)."""
    return STALL_BOUND_S if long_tests_enabled() else CI_STALL_BOUND_S


def assert_passed(report: ChaosReport, stall_bound_s: float = STALL_BOUND_S) -> None:
    text = render(report)
    assert not report.lost, text
    assert not report.stored_twice, text
    assert not report.notes, text
    assert report.longest_stall_s <= stall_bound_s, text
    assert report.acked > 0, text


@pytest.mark.timeout(1200)
async def test_a_random_fault_campaign_loses_nothing_and_stalls_no_client(tmp_path: Path) -> None:
    long = long_tests_enabled()
    seed = random.randrange(1 << 32) if long else CI_SEED
    options = ChaosOptions(duration_s=600 if long else 25, seed=seed, lease_ttl_s=LEASE_TTL_S)
    report = await run_campaign(options, tmp_path / "system")
    print(f"seed {seed}\n{render(report)}")
    assert_passed(report, stall_bound_s())
    if long:
        assert len(report.faults) >= 150, render(report)
    hit = {o.fault.target for o in report.faults}
    assert len(hit) >= (6 if long else 3), f"faults hit only {sorted(hit)} (seed {seed})"


@pytest.mark.timeout(600)
async def test_etcd_killed_or_paused_for_10_s(tmp_path: Path) -> None:
    """The data path keeps accepting while the ownership lease is surely valid, stops
    before it could expire (fencing), and everything resumes soon after etcd is back."""
    # The pause comes first, from steady state. Right after a kill the clients move
    # again (the lease is still valid) before the router's next keep-alive reaches the
    # restarted etcd, so a pause then can begin with less than 2/3 of the TTL left.
    plan = [PlannedFault("etcd", "stop", pause_s=10), PlannedFault("etcd", "kill")]
    options = ChaosOptions(duration_s=1, plan=plan, lease_ttl_s=LEASE_TTL_S)
    report = await run_campaign(options, tmp_path / "system")
    print(render(report))
    # A 10 s pause outlives the 5 s lease: once etcd is back the router re-grants,
    # re-claims and reopens its partitions, within `stall_bound_s()` (1 s with
    # TAMTO_LONG_TESTS=1; CI's shared machine gets the regression bound).
    assert_passed(report, stall_bound_s())
    paused = report.faults[0]
    producers = {k: v for k, v in paused.served_s.items() if k.startswith("producer")}
    for name, served in producers.items():
        # Refreshed every TTL/3, the lease was valid for at least 2/3 of the TTL into
        # the pause; no ack may come later than one TTL in.
        assert 1.0 <= served <= LEASE_TTL_S, (name, served, render(report))


@pytest.mark.timeout(600)
async def test_nats_killed_or_paused_for_10_s(tmp_path: Path) -> None:
    """Publishing and consuming do not need NATS: they go on through its outage."""
    plan = [PlannedFault("nats", "kill"), PlannedFault("nats", "stop", pause_s=10)]
    options = ChaosOptions(duration_s=1, plan=plan, lease_ttl_s=LEASE_TTL_S)
    report = await run_campaign(options, tmp_path / "system")
    print(render(report))
    assert_passed(report, stall_bound_s())
    paused = report.faults[1]
    for name, served in paused.served_s.items():
        assert served >= 9.0, (name, served, render(report))


#: The cluster campaign's seed in CI (TAMTO_LONG_TESTS=1 draws one per run, printed).
CLUSTER_CI_SEED = 5


@pytest.mark.timeout(900)
async def test_a_cluster_fault_campaign_loses_nothing(tmp_path: Path) -> None:
    """Kill -9 and SIGSTOP of random storage nodes and routers of a
    three-node cluster (R = 3, Q = 2) during traffic; nothing acknowledged is lost or
    stored twice, and every fault is over (its process serving, every client moving)
    within the campaign's limit. Stalls are printed, not bounded: a killed router's
    partitions wait out its lease before another router claims them."""
    long = long_tests_enabled()
    seed = random.randrange(1 << 32) if long else CLUSTER_CI_SEED
    options = ChaosOptions(
        duration_s=600 if long else 12,
        seed=seed,
        lease_ttl_s=3,
        nodes=3,
        targets=("storage", "router"),
    )
    report = await run_campaign(options, tmp_path / "system")
    print(f"seed {seed}\n{render(report)}")
    assert_passed(report, stall_bound_s=float("inf"))
    assert report.faults, render(report)
    if long:
        hit = {o.fault.target for o in report.faults}
        assert len(hit) >= 6, f"faults hit only {sorted(hit)} (seed {seed})"
