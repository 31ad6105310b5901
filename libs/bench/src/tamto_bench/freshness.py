"""The arithmetic of freshness: how long after its durable ack a message is visible to a
reader of the segment store or of its Iceberg table.

A probe is one acknowledged message: its partition, offset and the wall-clock time
its ack arrived. A reader is polled over and over; each poll is a `Sighting`: when the
poll started and, per partition, the end of what it could read (the offset just past
its last visible message). A probe is visible at the start of the first poll that
started after its ack and whose end for its partition is past its offset. Its
freshness is that time minus its ack: an upper bound, at most one poll period plus
one read late.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The percentile rule of every other row (`tamto_bench.runner.stats.percentile`).
_PERCENTILES = (("p50_s", 50.0), ("p99_s", 99.0))


@dataclass(frozen=True, slots=True)
class Probe:
    """One acknowledged message: where it is, and when its ack arrived (wall clock)."""

    partition: int
    offset: int
    acked_at: float


@dataclass(frozen=True, slots=True)
class Sighting:
    """One poll of a reader: when it started (wall clock), and per partition the end of
    what it could read (a partition it could not read yet is absent)."""

    at: float
    ends: Mapping[int, int]


def visible_after(probes: Sequence[Probe], sightings: Sequence[Sighting]) -> list[float | None]:
    """Per probe, the seconds from its ack to the first sighting that shows it (None:
    no sighting did). `sightings` in the order they were taken."""
    ordered = sorted(sightings, key=lambda s: s.at)
    out: list[float | None] = []
    for probe in probes:
        seen = next(
            (
                s.at
                for s in ordered
                if s.at >= probe.acked_at and s.ends.get(probe.partition, 0) > probe.offset
            ),
            None,
        )
        out.append(None if seen is None else seen - probe.acked_at)
    return out


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile `q` (0-100) of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def summary(delays: Sequence[float | None]) -> dict[str, Any]:
    """p50, p99 and max (seconds) of the probes that became visible, how many there were,
    and how many never did (`unseen`: the p99 is then a lower bound)."""
    seen = sorted(d for d in delays if d is not None)
    out: dict[str, Any] = {name: _percentile(seen, q) for name, q in _PERCENTILES}
    out["max_s"] = seen[-1] if seen else math.nan
    out["probes"] = len(delays)
    out["unseen"] = len(delays) - len(seen)
    return out


def all_visible(probes: Sequence[Probe], ends: Mapping[int, int]) -> bool:
    """Whether a reader whose ends are `ends` shows every probe."""
    return all(ends.get(p.partition, 0) > p.offset for p in probes)
