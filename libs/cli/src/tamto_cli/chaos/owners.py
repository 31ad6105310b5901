"""No two owners acking one partition at once, judged from the routers' own records.

Each router logs, per epoch of a partition it owned, the moment of its first
acknowledgement (`acking as owner`) and, when that epoch's log closed, its first
and last (`owner acks over`; `tamto_router.owner_acks`). Read from the
campaign's router logs, each epoch is a `Tenure`: from its first ack to its
last. An epoch with no `owner acks over` record may have acked until its router
was killed (the first kill of it after the first ack) or, failing that, until
the end of the run. Two tenures of one partition overlap when one began before
the other ended: that is two owners acknowledging at once, a split brain.
Pure functions, so the rules are tested without a campaign.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The routers' log events (`tamto_router.owner_acks`).
STARTED = "acking as owner"
OVER = "owner acks over"


@dataclass(frozen=True)
class Tenure:
    """Epoch `epoch` of `stream`/`partition` on router process `router`, acking from
    `first` to `last` (wall-clock seconds; `last` is inf while nothing bounds it)."""

    router: str
    stream: str
    partition: int
    epoch: int
    first: float
    last: float
    acks: int = 0


def tenures(
    lines_by_router: Mapping[str, Iterable[str]],
    kills: Mapping[str, Sequence[float]] | None = None,
    end: float = math.inf,
) -> list[Tenure]:
    """Every epoch's tenure from the routers' log lines (router process -> lines);
    `kills` (router -> wall-clock moments of its kills) and `end` bound the tenures
    whose router logged no end."""
    found: dict[tuple[str, str, int, int], Tenure] = {}
    for router, lines in lines_by_router.items():
        for line in lines:
            record = _record(line)
            if record is None:
                continue
            key = (router, str(record["stream"]), int(record["partition"]), int(record["epoch"]))
            first = float(record["first_ack_at"])
            if record["event"] == OVER:
                acks = int(record.get("acks", 0))
                found[key] = Tenure(*key, first, float(record["last_ack_at"]), acks)
            elif key not in found:
                killed = [k for k in (kills or {}).get(router, ()) if k >= first]
                found[key] = Tenure(*key, first, min(killed, default=end))
    return sorted(found.values(), key=lambda t: (t.stream, t.partition, t.epoch, t.first))


def log_event(line: str) -> dict[str, Any] | None:
    """The record of a service's JSON log line (None: the line is not a JSON object)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _record(line: str) -> dict[str, Any] | None:
    if STARTED not in line and OVER not in line:
        return None
    record = log_event(line)
    if record is None or record.get("event") not in (STARTED, OVER):
        return None
    return record


def overlaps(found: Sequence[Tenure]) -> list[str]:
    """Each pair of tenures of one partition whose acking overlapped, described."""
    by_partition: dict[tuple[str, int], list[Tenure]] = {}
    for tenure in found:
        by_partition.setdefault((tenure.stream, tenure.partition), []).append(tenure)
    problems = []
    for (stream, partition), group in sorted(by_partition.items()):
        group.sort(key=lambda t: t.first)
        for i, earlier in enumerate(group):
            for later in group[i + 1 :]:
                if later.first <= earlier.last:
                    problems.append(
                        f"{stream}/{partition}: epoch {earlier.epoch} on {earlier.router} acked "
                        f"until {earlier.last:.3f}, after epoch {later.epoch} on {later.router} "
                        f"first acked at {later.first:.3f}"
                    )
    return problems


def read_router_logs(log_dir: Path) -> dict[str, list[str]]:
    """The lines of each router's log in a campaign's log directory (`router*.log`)."""
    return {
        path.stem: path.read_text(errors="replace").splitlines()
        for path in sorted(log_dir.glob("router*.log"))
    }
