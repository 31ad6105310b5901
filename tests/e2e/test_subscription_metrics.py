"""The router's per-subscription metrics are the numbers `tamto sub describe` shows
(summed over partitions), and its stream counters count what went in and out."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import tamto_sdk
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

from .members import metrics_of

pytestmark = pytest.mark.e2e

STREAM = "watched"
ROUTER_ENV = {"TAMTO_ROUTER_SUBSCRIPTION_METRICS_S": "0.2"}


def samples(page: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
    }


def figure(page: str, name: str, **labels: str) -> float | None:
    return samples(page).get((name, tuple(sorted(labels.items()))))


async def test_subscription_metrics_match_describe(tamto_infra: Infra, tmp_path: Path) -> None:
    with TestCluster(tmp_path / "cluster", tamto_infra).running({"router": ROUTER_ENV}) as cluster:
        async with await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            await client.streams.ensure(STREAM, partitions=2)
            async with client.producer(STREAM) as producer:
                await (await producer.send_batch([f"m{i}".encode() for i in range(15)]))
            async with client.consumer(STREAM, "billing") as consumer:
                got: list[tamto_sdk.Message] = []
                while len(got) < 15:
                    batch = await consumer.receive_batch(max_messages=15, timeout_s=10)
                    assert len(batch) > 0, f"only {len(got)} of 15 came"
                    got.extend(batch)
                for message in got[:4]:
                    consumer.ack(message)
                await consumer.flush_acks(timeout_s=10)
                described = await client.subscriptions.describe(STREAM, "billing")
                assert described.backlog_messages == 11
                labels = {"stream": STREAM, "subscription": "billing"}

                async def matches() -> bool:
                    page = await metrics_of(cluster, "router")
                    return (
                        figure(page, "tamto_subscription_backlog_messages", **labels),
                        figure(page, "tamto_subscription_unacked", **labels),
                        figure(page, "tamto_subscription_consumers", **labels),
                    ) == (11, 11, 2)

                await eventually(matches, 30, "the router's figures to match describe")
                page = await metrics_of(cluster, "router")
                assert figure(page, "tamto_subscription_backlog_bytes", **labels) == sum(
                    p.backlog_bytes for p in described.partitions
                )
                age = figure(page, "tamto_subscription_oldest_unacked_age_seconds", **labels)
                assert age is not None
                assert 0 < age < 120
                assert figure(page, "tamto_subscription_redeliveries", **labels) == 0
        page = await metrics_of(cluster, "router")
        stream = {"stream": STREAM}
        assert figure(page, "tamto_router_stream_messages_total", direction="in", **stream) == 15
        assert figure(page, "tamto_router_stream_messages_total", direction="out", **stream) == 15
        assert figure(page, "tamto_router_ownership_changes_total", change="claimed") == 2
        # The producer published on the direct path (the default): the router timed
        # it to its ack, as the gateway times what goes through it.
        assert (figure(page, "tamto_router_publish_ack_seconds_count") or 0) >= 1
