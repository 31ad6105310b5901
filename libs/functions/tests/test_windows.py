"""Tumbling windows: aggregates per key per window, emitted once closed, kept across restarts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from tamto_functions.declarative import compile_steps
from tamto_functions.windows import Windows

from tamto_common.errors import InvalidArgument

STEPS: list[dict[str, Any]] = [
    {"parse_json": {"fields": {"amount": "float", "region": "string"}}},
    {
        "window": {
            "size_s": 60,
            "key": "region",
            "aggregates": {
                "revenue": ["sum", "amount"],
                "orders": ["count", "amount"],
                "largest": ["max", "amount"],
            },
        }
    },
]
MINUTE_US = 60_000_000


def orders(at_s: list[float], rows: list[tuple[str, float]]) -> pa.Table:
    return pa.table(
        {
            "offset": pa.array(range(len(rows)), pa.int64()),
            "publish_time": pa.array(
                [datetime.fromtimestamp(t, UTC) for t in at_s], pa.timestamp("us", tz="UTC")
            ),
            "payload": pa.array(
                [json.dumps({"region": r, "amount": a}).encode() for r, a in rows], pa.binary()
            ),
        }
    )


def emitted(windows: Windows, now_s: float) -> list[dict[str, object]]:
    table = windows.close(int(now_s * 1_000_000))
    return [] if table is None else [json.loads(p) for p in table.column("payload").to_pylist()]


def test_windows_add_up_across_batches_and_close_after_their_end() -> None:
    pipeline = compile_steps(STEPS, "revenue")
    assert pipeline.window is not None
    windows = Windows(pipeline.window, "fn")
    assert pipeline.run(orders([0, 10], [("eu", 5), ("us", 1)]), windows) == []
    pipeline.run(orders([30, 61], [("eu", 7), ("eu", 100)]), windows)
    assert emitted(windows, 59) == []
    first = emitted(windows, 60)
    assert first == [
        {
            "window_start_us": 0,
            "window_end_us": MINUTE_US,
            "key": "eu",
            "revenue": 12,
            "orders": 2,
            "largest": 7,
        },
        {
            "window_start_us": 0,
            "window_end_us": MINUTE_US,
            "key": "us",
            "revenue": 1,
            "orders": 1,
            "largest": 1,
        },
    ]
    assert emitted(windows, 60) == []
    assert emitted(windows, 120)[0]["revenue"] == 100


def test_a_restored_instance_goes_on_from_the_snapshot() -> None:
    pipeline = compile_steps(STEPS, "revenue")
    assert pipeline.window is not None
    before = Windows(pipeline.window, "fn")
    pipeline.run(orders([1], [("eu", 5)]), before)
    after = Windows(pipeline.window, "fn")
    after.restore(before.snapshot())
    pipeline.run(orders([2], [("eu", 6)]), after)
    closed = after.close(MINUTE_US)
    assert closed is not None
    assert json.loads(closed.column("payload")[0].as_py())["revenue"] == 11
    assert closed.column("id").to_pylist() == ["fn:w:0:eu"]


@pytest.mark.parametrize(
    ("window", "named"),
    [
        ({"size_s": 0, "aggregates": {"n": ["count", "x"]}}, "size_s"),
        ({"size_s": 60, "aggregates": {"n": ["median", "x"]}}, "aggregates.n"),
        ({"size_s": 60, "aggregates": {}}, "aggregates"),
        ({"size_s": 60, "time": "arrival", "aggregates": {"n": ["count", "x"]}}, "time"),
    ],
)
def test_a_bad_window_is_refused_naming_the_setting(window: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        compile_steps([{"window": window}], "out")
