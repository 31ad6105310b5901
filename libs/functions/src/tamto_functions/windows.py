"""Tumbling-window aggregates: count, sum, min and max per key per window, kept across batches.

The step ``{"window": {"size_s": 60, "key": "region", "time": "publish_time",
"lateness_s": 5, "aggregates": {"revenue": ["sum", "amount"], "orders": ["count",
"amount"]}}}`` groups each batch by (window, key) with one columnar group-by and
merges the partial aggregates into the instance's state, a few entries per key and
window (never per message). A window is emitted once the clock passes its end plus
`lateness_s`: one row per key, its payload the aggregates as JSON, its id
``<function>:w:<window start>:<key>`` so a window emitted again after a crash is
dropped by the output stream's dedup. The state is a small JSON document the runner
saves (`snapshot`) before it acks the inputs, and loads (`restore`) on start, so a
restarted instance goes on where the last one stopped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa

from tamto_common.errors import InvalidArgument
from tamto_functions.expressions import expression

OPERATIONS = ("count", "sum", "min", "max")
#: Open (window, key) entries an instance keeps, at most: beyond it, late keys are refused.
MAX_OPEN_ENTRIES = 100_000
US = 1_000_000


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """A validated window step."""

    size_us: int
    lateness_us: int
    key: pl.Expr
    time: str
    aggregates: Mapping[str, tuple[str, pl.Expr]]


def parse(where: str, value: Any) -> WindowSpec:
    """The window step's settings, or `InvalidArgument` naming the bad one."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{where}.window: a mapping (size_s, key, aggregates, ...)")
    size = value.get("size_s")
    if not isinstance(size, int | float) or not 1 <= size <= 86_400:
        raise InvalidArgument(f"{where}.window.size_s: 1 to 86400 seconds, got {size!r}")
    lateness = value.get("lateness_s", 0)
    if not isinstance(lateness, int | float) or not 0 <= lateness <= 3_600:
        raise InvalidArgument(f"{where}.window.lateness_s: 0 to 3600 seconds, got {lateness!r}")
    time = value.get("time", "publish_time")
    if time not in ("publish_time", "event_time"):
        raise InvalidArgument(f"{where}.window.time: publish_time or event_time, got {time!r}")
    aggregates = value.get("aggregates")
    if not isinstance(aggregates, Mapping) or not aggregates:
        raise InvalidArgument(f"{where}.window.aggregates: name at least one, e.g. [sum, amount]")
    parsed: dict[str, tuple[str, pl.Expr]] = {}
    for name, spec in aggregates.items():
        if not (isinstance(spec, list | tuple) and len(spec) == 2 and spec[0] in OPERATIONS):
            raise InvalidArgument(
                f"{where}.window.aggregates.{name}: [operation, expression] with an operation"
                f" of {', '.join(OPERATIONS)}"
            )
        parsed[str(name)] = (spec[0], expression(f"{where}.window.aggregates.{name}", spec[1]))
    key = expression(f"{where}.window.key", value.get("key", "key"))
    return WindowSpec(int(size * US), int(lateness * US), key, time, parsed)


@dataclass(slots=True)
class Windows:
    """One instance's open windows: (window start µs, key) to the aggregates so far."""

    spec: WindowSpec
    function: str
    open: dict[tuple[int, str], dict[str, float]] = field(default_factory=dict)

    def absorb(self, frame: pl.DataFrame) -> None:
        """Merge one batch's rows into the open windows (one group-by for the batch)."""
        if not frame.height:
            return
        spec = self.spec
        time_us = pl.col(spec.time).cast(pl.Datetime("us")).dt.epoch("us")
        partials = (
            frame.with_columns(
                _start=(time_us // spec.size_us) * spec.size_us,
                _key=spec.key.cast(pl.String).fill_null(""),
            )
            .group_by("_start", "_key")
            .agg(_aggregations(spec))
        )
        for row in partials.iter_rows(named=True):
            self._merge((int(row["_start"]), str(row["_key"])), row)

    def _merge(self, slot: tuple[int, str], row: Mapping[str, Any]) -> None:
        current = self.open.get(slot)
        if current is None:
            if len(self.open) >= MAX_OPEN_ENTRIES:
                raise RuntimeError(f"more than {MAX_OPEN_ENTRIES} open window entries")
            self.open[slot] = {n: _number(row[n]) for n in self.spec.aggregates}
            return
        for name, (operation, _) in self.spec.aggregates.items():
            current[name] = _combine(operation, current[name], _number(row[name]))

    def close(self, now_us: int) -> pa.Table | None:
        """The rows of every window that ended `lateness` before `now_us`, removed from state."""
        horizon = now_us - self.spec.lateness_us - self.spec.size_us
        done = sorted(slot for slot in self.open if slot[0] <= horizon)
        if not done:
            return None
        rows = [self._row(slot, self.open.pop(slot)) for slot in done]
        return pa.table(
            {
                "payload": pa.array([r[0] for r in rows], pa.binary()),
                "key": pa.array([r[1] for r in rows], pa.binary()),
                "id": pa.array([r[2] for r in rows], pa.string()),
            }
        )

    def _row(self, slot: tuple[int, str], values: Mapping[str, float]) -> tuple[bytes, bytes, str]:
        start, key = slot
        body = {
            "window_start_us": start,
            "window_end_us": start + self.spec.size_us,
            "key": key,
            **{n: _plain(v) for n, v in values.items()},
        }
        return json.dumps(body).encode(), key.encode(), f"{self.function}:w:{start}:{key}"

    def snapshot(self) -> bytes:
        """The open windows as JSON (what a restarted instance restores)."""
        entries = [[start, key, values] for (start, key), values in sorted(self.open.items())]
        return json.dumps(entries).encode()

    def restore(self, data: bytes) -> None:
        self.open = {(int(s), str(k)): dict(v) for s, k, v in json.loads(data)}


def _aggregations(spec: WindowSpec) -> list[pl.Expr]:
    operations = {
        "count": lambda e: e.count(),
        "sum": lambda e: e.sum(),
        "min": lambda e: e.min(),
        "max": lambda e: e.max(),
    }
    return [
        operations[operation](expr).cast(pl.Float64).alias(name)
        for name, (operation, expr) in spec.aggregates.items()
    ]


def _combine(operation: str, a: float, b: float) -> float:
    if operation in ("count", "sum"):
        return a + b
    return min(a, b) if operation == "min" else max(a, b)


def _number(value: Any) -> float:
    return float(value) if value is not None else 0.0


def _plain(value: float) -> float | int:
    return int(value) if value.is_integer() else value
