"""Reading a run's document and showing its numbers: a missing value is NaN, a ratio
of a missing value is NaN, and NaN prints as "-"."""

from __future__ import annotations

import math
from typing import Any


def num(value: Any) -> float:
    """`value` as a float; None (not measured) is NaN."""
    return float(value) if value is not None else math.nan


def get(doc: dict[str, Any], size: str, system: str, key: str) -> float:
    """`system`'s `key` at `size` in `doc` (NaN if not measured)."""
    return num(doc["sizes"].get(size, {}).get(system, {}).get(key))


def ratio_of(a: float, b: float) -> float:
    """a ÷ b, NaN if either is missing or b is 0."""
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def fmt(value: float, unit: str = "") -> str:
    """A value as a table shows it ("x": a ratio, "%": a share; "-": not measured)."""
    if value is None or math.isnan(value):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value * 100:.0f}%"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


def latency_keys(keys: Any) -> list[str]:
    """The `latency_<rate>` keys among `keys`, by rate."""
    return sorted(
        {k for k in keys if k.startswith("latency_")}, key=lambda k: float(k.split("_", 1)[1])
    )
