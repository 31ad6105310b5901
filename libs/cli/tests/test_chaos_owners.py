"""The owners' check of a network campaign: tenures from the routers' records, and
what counts as two owners acking one partition at once."""

from __future__ import annotations

import json
import math

from tamto_cli.chaos.owners import OVER, STARTED, Tenure, overlaps, tenures


def line(event: str, epoch: int, first: float, last: float | None = None, p: int = 0) -> str:
    record: dict[str, object] = {
        "event": event, "stream": "s", "partition": p, "epoch": epoch, "first_ack_at": first,
    }  # fmt: skip
    if last is not None:
        record |= {"last_ack_at": last, "acks": 3}
    return json.dumps(record)


def test_an_epoch_that_logged_its_end_spans_its_first_to_its_last_ack() -> None:
    found = tenures({"router": [line(STARTED, 4, 10.0), line(OVER, 4, 10.0, 12.5), "not json"]})
    assert found == [Tenure("router", "s", 0, 4, 10.0, 12.5, 3)]


def test_an_epoch_without_an_end_lasts_until_its_router_was_killed_or_the_run_ended() -> None:
    lines = {"router-2": [line(STARTED, 5, 20.0)], "router-3": [line(STARTED, 6, 30.0, p=1)]}
    found = tenures(lines, kills={"router-2": [5.0, 25.0, 27.0]}, end=99.0)
    assert [(t.router, t.last) for t in found] == [("router-2", 25.0), ("router-3", 99.0)]
    assert tenures({"router": [line(STARTED, 1, 1.0)]})[0].last == math.inf


def test_successive_owners_pass_and_overlapping_ones_are_named() -> None:
    handed_over = {
        "router": [line(OVER, 1, 1.0, 5.0)],
        "router-2": [line(OVER, 2, 5.5, 9.0)],
    }
    assert overlaps(tenures(handed_over)) == []
    split_brain = {
        "router": [line(OVER, 1, 1.0, 6.0)],
        "router-2": [line(OVER, 2, 5.5, 9.0)],
    }
    [problem] = overlaps(tenures(split_brain))
    assert "s/0: epoch 1 on router acked until 6.000" in problem
    assert "epoch 2 on router-2" in problem


def test_partitions_are_judged_apart_and_an_unended_epoch_overlaps_what_follows() -> None:
    other_partitions = {"router": [line(OVER, 1, 1.0, 9.0, p=0)], "router-2": [
        line(OVER, 1, 2.0, 3.0, p=1)]}  # fmt: skip
    assert overlaps(tenures(other_partitions)) == []
    never_ended = {"router": [line(STARTED, 1, 1.0)], "router-2": [line(OVER, 2, 50.0, 60.0)]}
    assert len(overlaps(tenures(never_ended))) == 1
