"""Per-subscription metrics: describe's figures summed per (stream, subscription), the
largest backlogs kept by name and the rest folded, and the series a router exports
with 1,000 partitions and 1,000 subscriptions within the stated bound."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY

from tamto_common.errors import Unavailable
from tamto_router.metrics import count_in, count_out
from tamto_router.model import ConsumerState, SubscriptionState
from tamto_router.subscription_metrics import (
    OTHER,
    Figures,
    SubscriptionCollector,
    SubscriptionSampler,
)

STREAMS, PARTITIONS, SUBSCRIPTIONS_PER_STREAM = 100, 10, 10  # 1,000 of each
LIMIT = 500


class FakeAdmin:
    """Every partition of a stream has the stream's subscriptions; the backlog of
    subscription i of stream s on a partition is s * 10 + i (all distinct)."""

    def __init__(self, failing: tuple[str, int] | None = None) -> None:
        self.failing = failing

    async def describe_all(self, stream: str, partition: int) -> dict[str, SubscriptionState]:
        if (stream, partition) == self.failing:
            raise Unavailable("storage is restarting")
        names = [f"sub-{i}" for i in range(SUBSCRIPTIONS_PER_STREAM)]
        return {name: self.describe(stream, partition, name) for name in names}

    @staticmethod
    def describe(stream: str, partition: int, name: str) -> SubscriptionState:
        s, i = int(stream.rsplit("-", 1)[1]), int(name.rsplit("-", 1)[1])
        now_us = time.time_ns() // 1000
        return SubscriptionState(
            partition,
            exists=True,
            backlog_messages=s * 10 + i,
            backlog_bytes=(s * 10 + i) * 100,
            unacked=1,
            oldest_unacked_publish_time_us=now_us - (partition + 1) * 1_000_000,
            redeliveries=2,
            dead_lettered=partition % 2,
            consumers=(ConsumerState("c", 10, 1),),
        )


def open_logs() -> list[tuple[str, int]]:
    return [(f"card-{s}", p) for s in range(STREAMS) for p in range(PARTITIONS)]


def series(collector: SubscriptionCollector) -> dict[str, dict[tuple[str, ...], float]]:
    return {
        family.name: {tuple(x.labels.values()): x.value for x in family.samples}
        for family in collector.collect()
    }


async def test_figures_are_summed_over_partitions_and_the_age_is_the_largest() -> None:
    collector = SubscriptionCollector()
    await SubscriptionSampler(FakeAdmin(), open_logs, collector, 15, limit=10_000).sample()
    got = series(collector)
    key = ("card-3", "sub-4")
    assert got["tamto_subscription_backlog_messages"][key] == 34 * PARTITIONS
    assert got["tamto_subscription_backlog_bytes"][key] == 3400 * PARTITIONS
    assert got["tamto_subscription_unacked"][key] == PARTITIONS
    assert got["tamto_subscription_redeliveries"][key] == 2 * PARTITIONS
    assert got["tamto_subscription_dead_lettered"][key] == PARTITIONS // 2
    assert got["tamto_subscription_consumers"][key] == PARTITIONS
    age = got["tamto_subscription_oldest_unacked_age_seconds"][key]
    assert PARTITIONS - 1 < age < PARTITIONS + 5
    assert len(got["tamto_subscription_backlog_messages"]) == STREAMS * SUBSCRIPTIONS_PER_STREAM
    assert got["tamto_subscription_metrics_folded"][()] == 0


async def test_a_partition_that_fails_to_answer_is_left_out_of_the_sample() -> None:
    collector = SubscriptionCollector()
    failing = FakeAdmin(failing=("card-3", 0))
    sampler = SubscriptionSampler(failing, open_logs, collector, 15, limit=10_000)
    await sampler.sample()
    got = series(collector)["tamto_subscription_backlog_messages"]
    assert got[("card-3", "sub-4")] == 34 * (PARTITIONS - 1)


async def test_a_thousand_partitions_and_subscriptions_stay_within_the_series_bound() -> None:
    collector = SubscriptionCollector()
    await SubscriptionSampler(FakeAdmin(), open_logs, collector, 15, limit=LIMIT).sample()
    for stream, partition in open_logs():  # traffic on every partition
        count_in(stream, 10, 1000)
        count_out(stream, 10, 1000, time.time_ns() // 1000, first=True)
        assert partition < PARTITIONS

    subscription_series = sum(len(v) for v in series(collector).values())
    stream_series = sum(
        1
        for family in REGISTRY.collect()
        if family.name.startswith("tamto_router_stream_")
        for sample in family.samples
        if sample.labels.get("stream", "").startswith("card-") and sample.name.endswith("_total")
    )
    # The bound (docs/operations.md, "Metrics"): 7 x (limit + 1) + 1 subscription
    # series and 4 per stream, whatever the number of partitions.
    assert subscription_series <= 7 * (LIMIT + 1) + 1
    assert stream_series == 4 * STREAMS
    assert subscription_series + stream_series <= 7 * (LIMIT + 1) + 1 + 4 * STREAMS

    got = series(collector)
    backlog = got["tamto_subscription_backlog_messages"]
    assert len(backlog) == LIMIT + 1
    assert got["tamto_subscription_metrics_folded"][()] == 1000 - LIMIT
    # The largest backlogs are kept by name, the rest summed: nothing is lost.
    assert ("card-99", "sub-9") in backlog
    assert ("card-0", "sub-0") not in backlog
    total = sum(s * 10 + i for s in range(STREAMS) for i in range(10)) * PARTITIONS
    assert sum(backlog.values()) == total
    assert backlog[(OTHER, OTHER)] == sum(range(LIMIT)) * PARTITIONS


def test_figures_add_sums_all_but_the_age() -> None:
    a = Figures(1, 2, 3, 4, 5, 6, 7.0)
    a.add(Figures(1, 1, 1, 1, 1, 1, 3.0))
    assert a == Figures(2, 3, 4, 5, 6, 7, 7.0)
