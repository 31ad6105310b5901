"""What a fault campaign measured, judged: losses, duplicates, stalls, recovery times.

The campaign (`tamto_cli.chaos.campaign`) records facts as they happen: every
fault with when it hit and when its process was serving again, every moment a
client made progress (a producer's ack, a consumer's delivery), the ids acked,
delivered and finally read back. `check` turns them into a `ChaosReport`; it
is pure, so its rules are tested without running a campaign.

A client's stall beyond downtime is measured per gap between two of its
progress moments: the gap less the time within it that some faulted process
was down (the whole gap if no fault touched it). A fault's recovery time is
how long after the system was whole again (its process serving, and any fault
overlapping it over too) the slowest client made progress.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: The bound: no client stalls longer than this beyond the downtime it waited out.
STALL_BOUND_S = 1.0
#: Stalls shorter than this are not attributed to faults (`fault_stalls`): clients
#: progress every few tens of milliseconds, and those gaps say nothing about a fault.
ATTRIBUTED_STALL_S = 0.1


@dataclass(frozen=True)
class Fault:
    """One fault: `kind` ("kill" or "stop") on process `target`, from `at` until `back`
    (monotonic seconds): the restarted process answering its health check, or SIGCONT."""

    target: str
    kind: str
    at: float
    back: float

    @property
    def downtime_s(self) -> float:
        return self.back - self.at


@dataclass(frozen=True)
class FaultOutcome:
    fault: Fault
    #: Seconds from `fault.back` until every client progressed again (None: some never did).
    recovery_s: float | None
    #: Per client, how long into the fault it still progressed (0: not at all): what
    #: kept serving while the process was down (NATS: the whole outage; etcd: while
    #: the partitions' ownership lease was surely valid, and never longer than its TTL).
    served_s: dict[str, float] = field(default_factory=dict)
    #: The longest stall beyond downtime of any client in a gap overlapping this fault
    #: (`fault_stalls`): which faults the clients waited longest after.
    stall_s: float = 0.0


@dataclass(frozen=True)
class ChaosReport:
    duration_s: float
    faults: list[FaultOutcome]
    acked: int
    #: Acked ids the final read did not find.
    lost: list[str]
    #: Ids the final read found more than once.
    stored_twice: list[str]
    #: Ids a campaign consumer received more than once (redeliveries: at-least-once).
    delivered_twice: int
    #: Per client, the longest stall beyond the downtime of the faults it overlapped.
    stalls: dict[str, float]
    #: Sends that failed for good (the SDK gave up after its retry deadline).
    send_failures: int
    #: What went wrong besides the measures above (a campaign with notes fails).
    notes: list[str] = field(default_factory=list)
    #: The longest stall beyond downtime allowed (a network campaign: lease TTL + 1 s).
    stall_bound_s: float = STALL_BOUND_S
    #: Network campaigns: epochs that acked as owners, per the routers' records
    #: (`tamto_cli.chaos.owners`), and each overlap of two on one partition.
    owner_epochs: int = 0
    owner_overlaps: list[str] = field(default_factory=list)
    #: Network campaigns: replicas (storage node x partition) compared with the final
    #: read, and what was still wrong (`tamto_cli.chaos.replicas`).
    replicas_checked: int = 0
    replica_problems: list[str] = field(default_factory=list)

    @property
    def longest_stall_s(self) -> float:
        return max(self.stalls.values(), default=0.0)

    @property
    def passed(self) -> bool:
        return (
            not self.lost
            and not self.stored_twice
            and self.longest_stall_s <= self.stall_bound_s
            and not self.notes
            and not self.owner_overlaps
            and not self.replica_problems
        )

    def faults_by_kind(self) -> Counter[str]:
        return Counter(f"{o.fault.kind} {o.fault.target}" for o in self.faults)


def stall_beyond_downtime(progress: Sequence[float], faults: Sequence[Fault]) -> float:
    """The longest gap between two progress moments, less the time within it that some
    faulted process was down (see the module docstring). `progress` is sorted."""
    return max((beyond for _, _, beyond in _gaps(progress, faults)), default=0.0)


def _gaps(progress: Sequence[float], faults: Sequence[Fault]) -> list[tuple[float, float, float]]:
    """(before, after, stall beyond downtime) of each gap between two progress moments."""
    ordered = sorted(faults, key=lambda f: f.at)
    gaps = []
    for before, after in itertools.pairwise(progress):
        down, reached = 0.0, before
        for fault in ordered:
            if fault.at >= after:
                break
            start, end = max(fault.at, reached), min(fault.back, after)
            if end > start:
                down += end - start
                reached = end
        gaps.append((before, after, after - before - down))
    return gaps


def fault_stalls(progress: Mapping[str, Sequence[float]], faults: Sequence[Fault]) -> list[float]:
    """Per fault (in `faults` order), the longest stall beyond downtime of any client in
    a gap that overlaps the fault (0.0 when none does). A stall is counted under every
    fault its gap overlaps; stalls under `ATTRIBUTED_STALL_S` are left out."""
    stalls = [0.0] * len(faults)
    for moments in progress.values():
        for before, after, beyond in _gaps(moments, faults):
            if beyond < ATTRIBUTED_STALL_S:
                continue
            for i, fault in enumerate(faults):
                if fault.at < after and fault.back > before:
                    stalls[i] = max(stalls[i], beyond)
    return stalls


def whole_again(fault: Fault, faults: Sequence[Fault]) -> float:
    """When no fault was in progress any more after `fault.back`: the end of the run of
    overlapping faults `fault` ended in."""
    whole = fault.back
    for other in sorted(faults, key=lambda f: f.at):
        if other.at < whole < other.back:
            whole = other.back
    return whole


def recovery_time(
    fault: Fault, progress: Mapping[str, Sequence[float]], faults: Sequence[Fault] = ()
) -> float | None:
    """Seconds after the system was whole again (`whole_again`; `fault.back` when no other
    fault overlapped it) until every client progressed (None if one never did)."""
    whole = whole_again(fault, faults)
    slowest = 0.0
    for moments in progress.values():
        i = bisect.bisect_right(moments, whole)
        if i == len(moments):
            return None
        slowest = max(slowest, moments[i] - whole)
    return slowest


def served_during(fault: Fault, progress: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Per client, its last progress moment within the fault, as seconds after `fault.at`."""
    served = {}
    for name, moments in progress.items():
        i = bisect.bisect_right(moments, fault.back)
        last = moments[i - 1] if i else -math.inf
        served[name] = max(0.0, last - fault.at)
    return served


def check(
    *,
    duration_s: float,
    faults: Sequence[Fault],
    progress: Mapping[str, Sequence[float]],
    acked: Iterable[str],
    delivered: Counter[str],
    read_back: Counter[str],
    send_failures: int = 0,
    notes: Sequence[str] = (),
    stall_bound_s: float = STALL_BOUND_S,
    replicas_checked: int = 0,
    replica_problems: Sequence[str] = (),
) -> ChaosReport:
    """Judge one campaign (see the module docstring)."""
    ordered = {name: sorted(moments) for name, moments in progress.items()}
    faults = sorted(faults, key=lambda f: f.at)
    acked_set = set(acked)
    stalls = fault_stalls(ordered, faults)
    return ChaosReport(
        duration_s=duration_s,
        faults=[
            FaultOutcome(f, recovery_time(f, ordered, faults), served_during(f, ordered), stall)
            for f, stall in zip(faults, stalls, strict=True)
        ],
        acked=len(acked_set),
        lost=sorted(acked_set - set(read_back)),
        stored_twice=sorted(i for i, n in read_back.items() if n > 1),
        delivered_twice=sum(1 for n in delivered.values() if n > 1),
        stalls={name: stall_beyond_downtime(m, faults) for name, m in ordered.items()},
        send_failures=send_failures,
        notes=list(notes),
        stall_bound_s=stall_bound_s,
        replicas_checked=replicas_checked,
        replica_problems=list(replica_problems),
    )


def render(report: ChaosReport) -> str:
    """The report as Markdown (what `tamto chaos` prints and docs/recovery.md shows)."""
    recoveries = sorted(o.recovery_s for o in report.faults if o.recovery_s is not None)
    never = sum(1 for o in report.faults if o.recovery_s is None)

    def pct(q: float) -> str:
        if not recoveries:
            return "-"
        return f"{recoveries[min(len(recoveries) - 1, int(q * len(recoveries)))]:.2f} s"

    lines = [
        f"**{'PASS' if report.passed else 'FAIL'}**: {len(report.faults)} faults in "
        f"{report.duration_s:.0f} s",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| messages acknowledged | {report.acked} |",
        f"| acknowledged but lost | {len(report.lost)} |",
        f"| stored twice | {len(report.stored_twice)} |",
        f"| delivered more than once (redeliveries) | {report.delivered_twice} |",
        f"| sends failed after the SDK's retry deadline | {report.send_failures} |",
        f"| longest stall beyond downtime (bound) | {report.longest_stall_s:.2f} s "
        f"({report.stall_bound_s:.0f} s) |",
        f"| recovery per fault: median / p90 / max | {pct(0.5)} / {pct(0.9)} / "
        f"{recoveries[-1] if recoveries else 0:.2f} s |",
        f"| faults after which a client never progressed | {never} |",
        *_network_rows(report),
        "",
        "| client | longest stall beyond downtime |",
        "| --- | --- |",
        *(f"| {name} | {stall:.2f} s |" for name, stall in sorted(report.stalls.items())),
        "",
        "| fault | count | downtime median | recovery max | stall beyond downtime max |",
        "| --- | --- | --- | --- | --- |",
    ]
    groups: dict[str, list[FaultOutcome]] = {}
    for outcome in report.faults:
        groups.setdefault(f"{outcome.fault.kind} {outcome.fault.target}", []).append(outcome)
    for name, outcomes in sorted(groups.items()):
        downs = sorted(o.fault.downtime_s for o in outcomes)
        worst = max((o.recovery_s for o in outcomes if o.recovery_s is not None), default=0.0)
        stall = max(o.stall_s for o in outcomes)
        lines.append(
            f"| {name} | {len(outcomes)} | {downs[len(downs) // 2]:.2f} s | {worst:.2f} s "
            f"| {stall:.2f} s |"
        )
    if report.lost:
        lines += ["", f"lost (first 20): {', '.join(report.lost[:20])}"]
    if report.stored_twice:
        lines += ["", f"stored twice (first 20): {', '.join(report.stored_twice[:20])}"]
    lines += [f"- {note}" for note in report.notes]
    lines += [f"- two owners at once: {o}" for o in report.owner_overlaps[:20]]
    lines += [f"- replica not whole: {p}" for p in report.replica_problems[:20]]
    return "\n".join(lines)


def _network_rows(report: ChaosReport) -> list[str]:
    """The network campaign's rows: owners' records and replicas (none otherwise)."""
    if not report.owner_epochs and not report.replicas_checked:
        return []
    return [
        f"| epochs that acked as owner (routers' records) | {report.owner_epochs} |",
        f"| two owners acking one partition at once | {len(report.owner_overlaps)} |",
        f"| replicas compared (node x partition) | {report.replicas_checked} |",
        f"| replica problems at the end (offsets missing or held with another id) "
        f"| {len(report.replica_problems)} |",
    ]
