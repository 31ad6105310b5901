"""The load balancer's decision and load meter, with a fake clock (no processes)."""

from __future__ import annotations

import json

from tamto_router.balancer import (
    BalanceSettings,
    LoadMeter,
    LoadReport,
    PartitionLoad,
    decide,
)

SETTINGS = BalanceSettings(threshold=2.0, min_load=100.0, cooldown_s=30.0, report_interval_s=5.0)


def report(router: str, *loads: float) -> LoadReport:
    return LoadReport(
        router, 0.5, tuple(PartitionLoad("s", i, load, 0.0) for i, load in enumerate(loads))
    )


def at(now: float, *reports: LoadReport) -> dict[str, tuple[float, LoadReport]]:
    return {r.router: (now, r) for r in reports}


def test_the_hottest_partition_below_the_gap_moves_to_the_idlest_router() -> None:
    reports = at(100.0, report("a", 400, 300, 50), report("b", 100), report("c", 60))
    move = decide(reports, ["a", "b", "c"], 100.0, 0.0, SETTINGS)
    assert move is not None
    # a: 750, c: 60 -> the gap is 690; 400 is the hottest below it.
    assert (move.stream, move.partition, move.source, move.target) == ("s", 0, "a", "c")


def test_a_partition_as_large_as_the_gap_does_not_move() -> None:
    # One hot partition: moving it would only make the other router the busy one.
    reports = at(0.0, report("a", 500, 10), report("b", 20))
    move = decide(reports, ["a", "b"], 0.0, 0.0, SETTINGS)
    assert move is not None
    assert move.partition == 1
    assert decide(at(0.0, report("a", 500), report("b", 0)), ["a", "b"], 0.0, 0.0, SETTINGS) is None


def test_no_move_within_the_bound_below_the_minimum_or_in_the_cooldown() -> None:
    balanced = at(0.0, report("a", 300, 100), report("b", 250))
    assert decide(balanced, ["a", "b"], 0.0, 0.0, SETTINGS) is None  # 400 <= 2 x 250
    light = at(0.0, report("a", 50, 40), report("b"))
    assert decide(light, ["a", "b"], 0.0, 0.0, SETTINGS) is None  # 90 < min_load
    busy = at(10.0, report("a", 300, 200), report("b"))
    assert decide(busy, ["a", "b"], 10.0, 40.0, SETTINGS) is None  # quiet until 40
    busy_later = at(40.0, report("a", 300, 200), report("b"))
    assert decide(busy_later, ["a", "b"], 40.0, 40.0, SETTINGS) is not None


def test_stale_reports_and_ineligible_routers_do_not_count() -> None:
    reports = {
        "a": (0.0, report("a", 300, 200)),
        "b": (100.0, report("b", 10)),
    }
    # a's report is older than three intervals: nothing to move from.
    assert decide(reports, ["a", "b"], 100.0, 0.0, SETTINGS) is None
    fresh = at(100.0, report("a", 300, 200), report("b", 10))
    assert decide(fresh, ["a"], 100.0, 0.0, SETTINGS) is None  # b is drained or gone
    # A live router that has not reported yet is idle: a partition moves to it.
    move = decide(fresh, ["a", "b", "new"], 100.0, 0.0, SETTINGS)
    assert move is not None
    assert move.target == "new"


def test_bytes_weigh_per_kib() -> None:
    # 10 messages/s of 70 KiB each outweigh 600 small ones.
    heavy = LoadReport(
        "a", 0.0, (PartitionLoad("s", 0, 10, 1024 * 700), PartitionLoad("s", 1, 600, 0))
    )
    move = decide(at(0.0, heavy, report("b")), ["a", "b"], 0.0, 0.0, SETTINGS)
    assert move is not None
    assert move.partition == 0


def test_the_meter_reports_rates_over_the_interval() -> None:
    clock, cpu = [0.0], [1.0]
    totals: dict[tuple[str, int], tuple[int, int]] = {("s", 0): (100, 1000)}
    meter = LoadMeter("a", lambda: dict(totals), lambda: clock[0], lambda: cpu[0])
    clock[0], cpu[0] = 2.0, 2.0
    totals[("s", 0)] = (300, 5000)
    totals[("s", 1)] = (40, 400)  # opened during the interval
    first = meter.sample()
    assert first.cpu == 0.5
    assert first.partitions == (PartitionLoad("s", 0, 100, 2000), PartitionLoad("s", 1, 20, 200))
    clock[0] = 4.0
    totals[("s", 0)] = (10, 100)  # closed and opened again: counts from zero
    second = meter.sample()
    assert second.partitions[0] == PartitionLoad("s", 0, 5, 50)
    assert second.partitions[1] == PartitionLoad("s", 1, 0, 0)


def test_a_report_travels_as_an_event() -> None:
    sent = report("a", 12.5, 3)
    event = json.dumps(sent.to_event()).encode()
    assert LoadReport.from_event(event) == sent
