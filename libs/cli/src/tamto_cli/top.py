"""`tamto top`: a live terminal view of a running Tamto, read from its members' metrics.

What an operator glances at first: throughput per stream (messages and bytes in and
out at the routers), backlog per subscription (the routers' `tamto_subscription_*`
figures: what `tamto sub describe` shows), publish latency (to ack at the gateways,
to first delivery at the routers) and each member's health. The members come from
etcd, as for `tamto status`; each sample scrapes every member's /metrics page, and
rates and latency quantiles are taken over the interval between two samples, so the
view shows what happens now, not since the processes started.
"""

from __future__ import annotations

import asyncio
import math
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from tamto_cli.status import fetch_status
from tamto_common.membership import Member

#: A scraped series: (sample name, sorted label pairs) -> value.
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]

STREAM_MESSAGES = "tamto_router_stream_messages_total"
STREAM_BYTES = "tamto_router_stream_bytes_total"
#: Publish to ack through a gateway, and on the direct path at the owning router.
PUBLISH_ACK = ("tamto_gateway_publish_ack_seconds", "tamto_router_publish_ack_seconds")
PUBLISH_DELIVER = "tamto_router_publish_to_deliver_seconds"
SUBSCRIPTION = "tamto_subscription_"
LOOP_LAG = "tamto_event_loop_lag_max_seconds"


@dataclass(frozen=True)
class Sample:
    """Every member's metrics at one moment (an unreachable page: no series)."""

    at: float
    members: list[tuple[Member, str]]
    series: dict[str, Series]  # by member key


def parse(page: str) -> Series:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
    }


def _scrape(member: Member) -> Series:
    try:
        url = f"http://{member.metrics_address}/metrics"
        with urllib.request.urlopen(url, timeout=3) as response:
            return parse(response.read().decode())
    except (OSError, ValueError):
        return {}


async def take_sample(etcd: str) -> Sample:
    members = await fetch_status(etcd)
    pages = await asyncio.gather(*(asyncio.to_thread(_scrape, m) for m, _ in members))
    return Sample(
        time.monotonic(), members, {m.key: s for (m, _), s in zip(members, pages, strict=True)}
    )


@dataclass
class StreamRow:
    stream: str
    messages_in_per_s: float = 0.0
    messages_out_per_s: float = 0.0
    bytes_in_per_s: float = 0.0
    bytes_out_per_s: float = 0.0


@dataclass
class SubscriptionRow:
    stream: str
    subscription: str
    backlog_messages: float = 0.0
    backlog_bytes: float = 0.0
    unacked: float = 0.0
    consumers: float = 0.0
    oldest_unacked_age_seconds: float = 0.0
    redeliveries: float = 0.0
    dead_lettered: float = 0.0


@dataclass
class NodeRow:
    service: str
    instance: str
    address: str
    health: str
    scraped: bool
    event_loop_lag_max_s: float | None


@dataclass
class TopView:
    interval_s: float
    streams: list[StreamRow] = field(default_factory=list)
    subscriptions: list[SubscriptionRow] = field(default_factory=list)
    latency_s: dict[str, dict[str, float | None]] = field(default_factory=dict)
    nodes: list[NodeRow] = field(default_factory=list)


def _summed(sample: Sample, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """`name`'s series summed over members, by labels."""
    out: dict[tuple[tuple[str, str], ...], float] = defaultdict(float)
    for series in sample.series.values():
        for (sample_name, labels), value in series.items():
            if sample_name == name:
                out[labels] += value
    return out


def _rates(before: Sample, after: Sample, name: str) -> dict[tuple[str, str], float]:
    """Per (stream, direction): the increase of counter `name` per second (a restarted
    member's reset counts as no traffic)."""
    span = max(after.at - before.at, 1e-9)
    old = _summed(before, name)
    rates: dict[tuple[str, str], float] = {}
    for labels, value in _summed(after, name).items():
        keyed = dict(labels)
        rates[(keyed.get("stream", ""), keyed.get("direction", ""))] = (
            max(0.0, value - old.get(labels, 0.0)) / span
        )
    return rates


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative histogram buckets (upper bound, count), interpolated
    within a bucket as Prometheus' histogram_quantile does; None with no observation."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in ordered:
        if count >= rank:
            if math.isinf(upper):
                return lower
            inside = count - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = upper, count
    return None


def _latency(before: Sample, after: Sample, *histograms: str) -> dict[str, float | None]:
    """p50 and p99 of what `histograms` (of the same buckets) observed between the
    samples, over members."""
    counts: dict[float, float] = defaultdict(float)
    for histogram in histograms:
        old = _summed(before, f"{histogram}_bucket")
        for labels, value in _summed(after, f"{histogram}_bucket").items():
            counts[float(dict(labels)["le"])] += max(0.0, value - old.get(labels, 0.0))
    buckets = list(counts.items())
    return {"p50": quantile(0.5, buckets), "p99": quantile(0.99, buckets)}


def _subscriptions(sample: Sample) -> list[SubscriptionRow]:
    rows: dict[tuple[str, str], SubscriptionRow] = {}
    for series in sample.series.values():
        for (name, labels), value in series.items():
            if not name.startswith(SUBSCRIPTION) or name.endswith("_folded"):
                continue
            keyed = dict(labels)
            key = (keyed.get("stream", ""), keyed.get("subscription", ""))
            row = rows.setdefault(key, SubscriptionRow(*key))
            figure = name.removeprefix(SUBSCRIPTION)
            if figure == "oldest_unacked_age_seconds":
                row.oldest_unacked_age_seconds = max(row.oldest_unacked_age_seconds, value)
            elif hasattr(row, figure):
                setattr(row, figure, getattr(row, figure) + value)
    return sorted(rows.values(), key=lambda r: (-r.backlog_messages, r.stream, r.subscription))


def _nodes(sample: Sample) -> list[NodeRow]:
    nodes = []
    for member, health in sample.members:
        series = sample.series.get(member.key, {})
        lag = [v for (name, _), v in series.items() if name == LOOP_LAG]
        nodes.append(
            NodeRow(
                member.service,
                member.instance_id,
                member.address,
                health,
                bool(series),
                max(lag) if lag else None,
            )
        )
    return sorted(nodes, key=lambda n: (n.service, n.instance))


def build_view(before: Sample, after: Sample) -> TopView:
    messages = _rates(before, after, STREAM_MESSAGES)
    size = _rates(before, after, STREAM_BYTES)
    streams: dict[str, StreamRow] = {}
    for (stream, direction), rate in messages.items():
        row = streams.setdefault(stream, StreamRow(stream))
        setattr(row, f"messages_{direction}_per_s", rate)
        setattr(row, f"bytes_{direction}_per_s", size.get((stream, direction), 0.0))
    return TopView(
        interval_s=after.at - before.at,
        streams=sorted(streams.values(), key=lambda r: (-r.messages_in_per_s, r.stream)),
        subscriptions=_subscriptions(after),
        latency_s={
            "publish_to_ack": _latency(before, after, *PUBLISH_ACK),
            "publish_to_first_delivery": _latency(before, after, PUBLISH_DELIVER),
        },
        nodes=_nodes(after),
    )


def as_json(view: TopView) -> dict[str, object]:
    return asdict(view)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _table(title: str, columns: Iterable[str], left: int) -> Table:
    """A table whose first `left` columns are text, the others numbers."""
    table = Table(title=title, expand=True)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i < left else "right")
    return table


def render(view: TopView, limit: int = 20) -> Group:
    """The view as tables (the `limit` busiest streams and largest backlogs)."""
    return Group(
        _streams(view, limit), _backlog(view, limit), _latency_table(view), _nodes_table(view)
    )


def _streams(view: TopView, limit: int) -> Table:
    streams = _table(
        f"Throughput (last {view.interval_s:.1f} s)",
        ("stream", "in msg/s", "out msg/s", "in B/s", "out B/s"),
        1,
    )
    for s in view.streams[:limit]:
        streams.add_row(
            s.stream,
            f"{s.messages_in_per_s:,.0f}",
            f"{s.messages_out_per_s:,.0f}",
            f"{s.bytes_in_per_s:,.0f}",
            f"{s.bytes_out_per_s:,.0f}",
        )
    return streams


def _backlog(view: TopView, limit: int) -> Table:
    backlog = _table(
        "Backlog per subscription",
        (
            "stream",
            "subscription",
            "backlog",
            "bytes",
            "unacked",
            "consumers",
            "oldest unacked",
            "redelivered / dead",
        ),
        2,
    )
    for r in view.subscriptions[:limit]:
        backlog.add_row(
            r.stream,
            r.subscription,
            f"{r.backlog_messages:,.0f}",
            f"{r.backlog_bytes:,.0f}",
            f"{r.unacked:,.0f}",
            f"{r.consumers:.0f}",
            f"{r.oldest_unacked_age_seconds:.1f} s",
            f"{r.redeliveries:.0f} / {r.dead_lettered:.0f}",
        )
    return backlog


def _latency_table(view: TopView) -> Table:
    latency = _table("Latency", ("", "p50", "p99"), 1)
    for name, q in view.latency_s.items():
        latency.add_row(name.replace("_", " "), _ms(q["p50"]), _ms(q["p99"]))
    return latency


def _nodes_table(view: TopView) -> Table:
    nodes = _table("Nodes", ("service", "instance", "address", "health", "metrics", "loop held"), 6)
    for n in view.nodes:
        style = "" if n.health == "SERVING" and n.scraped else "red"
        nodes.add_row(
            n.service,
            n.instance,
            n.address,
            n.health,
            "ok" if n.scraped else "unreachable",
            _ms(n.event_loop_lag_max_s),
            style=style,
        )
    return nodes


async def run_top(etcd: str, interval_s: float, console: Console) -> None:
    """Refresh the view in place every `interval_s` until interrupted."""
    before = await take_sample(etcd)
    with Live(console=console, auto_refresh=False, screen=False) as live:
        while True:
            await asyncio.sleep(interval_s)
            after = await take_sample(etcd)
            live.update(render(build_view(before, after)), refresh=True)
            before = after


async def once(etcd: str, interval_s: float) -> TopView:
    """One view: two samples `interval_s` apart."""
    before = await take_sample(etcd)
    await asyncio.sleep(interval_s)
    return build_view(before, await take_sample(etcd))
