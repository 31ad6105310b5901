"""Freshness arithmetic (`tamto_bench.freshness`): each probe is visible at the start of
the first poll after its ack that shows its offset in its partition; p50/p99/max over
the probes seen, the others counted as unseen; and the verdict per reader takes the
worse window (pure functions; no system is started)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tamto_bench.freshness import Probe, Sighting, all_visible, summary, visible_after
from tamto_bench.report import finish, freshness_rows


def test_a_probe_is_visible_at_the_first_poll_after_its_ack_that_shows_it() -> None:
    probes = [Probe(0, 5, 100.0), Probe(1, 0, 100.5), Probe(0, 6, 101.0)]
    sightings = [
        Sighting(99.0, {0: 9}),  # before every ack: shows nothing that counts
        Sighting(102.0, {0: 6, 1: 0}),  # offset 5 of partition 0 only
        Sighting(104.5, {0: 7}),  # partition 1 still not
        Sighting(107.0, {0: 7, 1: 1}),
    ]
    assert visible_after(probes, sightings) == [2.0, 6.5, 3.5]


def test_sightings_out_of_order_and_a_probe_never_seen() -> None:
    probes = [Probe(2, 10, 50.0), Probe(3, 0, 50.0)]
    sightings = [Sighting(58.0, {2: 11}), Sighting(53.0, {2: 11})]
    assert visible_after(probes, sightings) == [3.0, None]
    assert not all_visible(probes, sightings[0].ends)
    assert all_visible(probes[:1], sightings[0].ends)


def test_summary_is_nearest_rank_over_the_probes_seen() -> None:
    delays: list[float | None] = [float(i) for i in range(1, 101)]
    delays.append(None)
    found = summary(delays)
    assert found["p50_s"] == 50.0
    assert found["p99_s"] == 99.0
    assert found["max_s"] == 100.0
    assert found["probes"] == 101
    assert found["unseen"] == 1


def test_summary_of_nothing_seen_is_not_a_number() -> None:
    found = summary([None, None])
    assert math.isnan(found["p50_s"])
    assert math.isnan(found["p99_s"])
    assert found["unseen"] == 2


def _window(p99_store: float, p99_iceberg: float, unseen: int = 0) -> dict[str, Any]:
    def reader(p99: float) -> dict[str, Any]:
        return {"p50_s": p99 / 2, "p99_s": p99, "max_s": p99, "probes": 200, "unseen": unseen}

    return {
        "load_msgs_s": 0.0,
        "storage_cpu_per_s": 0.1,
        **{"store": reader(p99_store), "iceberg": reader(p99_iceberg)},
    }


@pytest.mark.parametrize(
    ("rest", "load", "met"),
    [
        ((4.0, 6.0), (7.0, 9.5), {"store": True, "iceberg": True}),
        ((4.0, 6.0), (7.0, 10.5), {"store": True, "iceberg": False}),
    ],
)
def test_the_verdict_takes_the_worse_window(
    rest: tuple[float, float], load: tuple[float, float], met: dict[str, bool]
) -> None:
    doc: dict[str, Any] = {
        "sizes": {"1024": {"freshness": {"s3": {"rest": _window(*rest), "load": _window(*load)}}}},
        "memory_peak_rss_bytes": {},
    }
    finish(doc)
    found = {t["target"]: t for t in doc["targets"] if t["target"].startswith("freshness")}
    for reader, expected in met.items():
        verdict = found[f"freshness p99 ≤ 10 s (s3 {reader})"]
        assert verdict["met"] is expected
        assert verdict["value"] == max(rest[reader == "iceberg"], load[reader == "iceberg"])
    rows = freshness_rows(doc)
    assert [r[0] for r in rows] == [
        "S3 store on SeaweedFS (manifest), at rest",
        "S3 store on SeaweedFS (manifest), under load",
        "Iceberg snapshot (S3 store), at rest",
        "Iceberg snapshot (S3 store), under load",
    ]


def test_an_unseen_probe_misses_the_target_whatever_the_p99() -> None:
    doc: dict[str, Any] = {
        "sizes": {"100": {"freshness": {"dir": {"rest": _window(1, 1), "load": _window(1, 1, 3)}}}},
        "memory_peak_rss_bytes": {},
    }
    finish(doc)
    met = [t["met"] for t in doc["targets"] if t["target"].startswith("freshness")]
    assert met == [False, False]
