"""Per-subscription Prometheus metrics: the numbers `tamto sub describe` shows.

Operators ask how far behind a subscription is, and whether it is stuck. The
router that owns a partition knows, so it exports, per (stream, subscription),
summed over the partitions it owns: backlog in messages and bytes, unacked
(delivered, not acked), redeliveries and dead letters (kept with the cursor, so
they survive restarts and changes of owner), consumers attached, and the oldest
unacked message's age (the largest over its partitions). Summed over routers in
Prometheus (`sum by (stream, subscription)`), they are describe's totals.

The figures come from `SubscriptionAdmin.describe_all` (describe's code, asking
storage for each partition's start and size once), sampled every `interval_s` by a
task (describing asks storage: it cannot run in Prometheus's scrape thread), into a
snapshot the collector reads. At most `SAMPLE_CONCURRENCY` partitions are described
at once, so a router with many partitions takes longer per round, not more load.

Cardinality bound: at most `limit` subscriptions (`--subscription-metrics-limit`)
are exported by name, those with the largest backlog; the rest are summed into
one `stream="_other", subscription="_other"` row, and a gauge says how many were
folded. A router therefore exports at most 7 x (limit + 1) + 1 series here,
however many partitions and subscriptions it owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Protocol

import structlog
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

from tamto_common.errors import TamtoError
from tamto_router.model import SubscriptionState

log = structlog.get_logger(__name__)

#: The label values the subscriptions beyond the limit are summed under.
OTHER = "_other"

#: Subscriptions exported by name per router, by default.
DEFAULT_LIMIT = 500

#: Describe calls in flight at once while sampling.
SAMPLE_CONCURRENCY = 8


class Describer(Protocol):
    """What sampling needs of `tamto_router.admin.SubscriptionAdmin`."""

    async def describe_all(self, stream: str, partition: int) -> dict[str, SubscriptionState]: ...


@dataclass
class Figures:
    """One subscription's figures, summed over partitions (the age: the largest)."""

    backlog_messages: int = 0
    backlog_bytes: int = 0
    unacked: int = 0
    redeliveries: int = 0
    dead_lettered: int = 0
    consumers: int = 0
    oldest_unacked_age_seconds: float = 0.0

    def add(self, other: Figures) -> None:
        for f in fields(self):
            if f.name == "oldest_unacked_age_seconds":
                self.oldest_unacked_age_seconds = max(
                    self.oldest_unacked_age_seconds, other.oldest_unacked_age_seconds
                )
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


#: Each figure's metric (named in full: tests find the names in the code) and help.
_FAMILIES = {
    "backlog_messages": (
        "tamto_subscription_backlog_messages",
        "Messages not acked yet (describe's backlog), on the partitions this router owns",
    ),
    "backlog_bytes": (
        "tamto_subscription_backlog_bytes",
        "Estimated bytes of the backlog (messages times the partition's average stored size)",
    ),
    "unacked": ("tamto_subscription_unacked", "Messages delivered and not acked yet"),
    "redeliveries": (
        "tamto_subscription_redeliveries",
        "Messages delivered more than once (a total kept with the cursor: it survives "
        "restarts and changes of owner)",
    ),
    "dead_lettered": (
        "tamto_subscription_dead_lettered",
        "Messages moved to the dead-letter stream (a total kept with the cursor)",
    ),
    "consumers": ("tamto_subscription_consumers", "Consumers attached"),
    "oldest_unacked_age_seconds": (
        "tamto_subscription_oldest_unacked_age_seconds",
        "Age of the oldest message not acked yet (its publish time to now; 0 with no "
        "backlog), the largest over the partitions",
    ),
}


def figures_of(state: SubscriptionState, now_us: int) -> Figures:
    """The figures of one partition of a subscription, as describe found it."""
    oldest = state.oldest_unacked_publish_time_us
    return Figures(
        backlog_messages=state.backlog_messages,
        backlog_bytes=state.backlog_bytes,
        unacked=state.unacked,
        redeliveries=state.redeliveries,
        dead_lettered=state.dead_lettered,
        consumers=len(state.consumers),
        oldest_unacked_age_seconds=max(0, now_us - oldest) / 1e6 if oldest else 0.0,
    )


def summarize(
    rows: Iterable[tuple[str, str, Figures]], limit: int
) -> tuple[dict[tuple[str, str], Figures], int]:
    """Sum per (stream, subscription), keep the `limit` largest backlogs by name and
    fold the rest into one (`OTHER`, `OTHER`) row; also how many were folded."""
    summed: dict[tuple[str, str], Figures] = {}
    for stream, name, figures in rows:
        summed.setdefault((stream, name), Figures()).add(figures)
    if len(summed) <= limit:
        return summed, 0
    ranked = sorted(
        summed.items(), key=lambda kv: (-kv[1].backlog_messages, -kv[1].oldest_unacked_age_seconds)
    )
    kept = dict(ranked[:limit])
    other = Figures()
    for _, figures in ranked[limit:]:
        other.add(figures)
    kept[(OTHER, OTHER)] = other
    return kept, len(ranked) - limit


class SubscriptionCollector(Collector):
    """Serves the last snapshot as gauges (series vanish with their subscription)."""

    def __init__(self) -> None:
        self.snapshot: dict[tuple[str, str], Figures] = {}
        self.folded = 0

    def collect(self) -> Iterator[Metric]:
        snapshot, folded = self.snapshot, self.folded  # replaced whole, never mutated
        for f in fields(Figures):
            name, help_text = _FAMILIES[f.name]
            family = GaugeMetricFamily(name, help_text, labels=["stream", "subscription"])
            for (stream, subscription), figures in snapshot.items():
                family.add_metric([stream, subscription], getattr(figures, f.name))
            yield family
        yield GaugeMetricFamily(
            "tamto_subscription_metrics_folded",
            f"Subscriptions beyond the per-router limit, summed into the {OTHER!r} row",
            value=folded,
        )


class SubscriptionSampler:
    """Describes every subscription of the open partitions every `interval_s`."""

    def __init__(
        self,
        admin: Describer,
        open_logs: Callable[[], list[tuple[str, int]]],
        collector: SubscriptionCollector,
        interval_s: float,
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        self._admin = admin
        self._open_logs = open_logs
        self._collector = collector
        self._interval = interval_s
        self._limit = limit
        self._gate = asyncio.Semaphore(SAMPLE_CONCURRENCY)
        self._task: asyncio.Task[None] | None = None

    async def sample(self) -> None:
        """Take one snapshot (a partition that fails to answer is left out of it)."""
        rows: list[tuple[str, str, Figures]] = []
        parts = await asyncio.gather(*(self._partition(s, p) for s, p in self._open_logs()))
        for part in parts:
            rows.extend(part)
        self._collector.snapshot, self._collector.folded = summarize(rows, self._limit)

    async def _partition(self, stream: str, partition: int) -> list[tuple[str, str, Figures]]:
        async with self._gate:
            try:
                described = await self._admin.describe_all(stream, partition)
                now_us = time.time_ns() // 1000
                return [
                    (stream, name, figures_of(state, now_us)) for name, state in described.items()
                ]
            except TamtoError as exc:
                log.debug("subscription metrics skipped a partition", error=str(exc))
                return []

    async def _run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception:
                log.exception("sampling subscription metrics failed")
            await asyncio.sleep(self._interval)

    def start(self) -> None:
        """Export the collector (in the default registry) and sample until `stop`."""
        REGISTRY.register(self._collector)
        self._task = asyncio.create_task(self._run(), name="subscription-metrics")

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        REGISTRY.unregister(self._collector)
