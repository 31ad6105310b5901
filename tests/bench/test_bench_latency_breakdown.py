"""The latency phase's split: on the publish side the publishers' publish→durable-ack
times, each hop's mean server time over the phase and the messages per storage append;
on the deliver side the consumers' sequenced→deliver times; and the rows that show
them (pure functions; no system is started)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tamto_bench.report import rows
from tamto_bench.runner import publish_side
from tamto_bench.runner.stats import latency_summary
from tamto_bench.spec import JobResult


def test_timed_acks_time_successful_publishes_sent_after_the_warm_up() -> None:
    loop = asyncio.new_event_loop()
    try:
        result = JobResult()
        now = time.monotonic()
        timed = result.timed_acks(now - 1, now + 60, warm_ns=1_000)
        early, late, failed = (loop.create_future() for _ in range(3))
        early.add_done_callback(timed(999))  # sent before the warm-up ended: counted only
        late.add_done_callback(timed(time.time_ns() - 2_000_000))
        failed.add_done_callback(timed(time.time_ns()))
        early.set_result(None)
        late.set_result(None)
        failed.set_exception(RuntimeError("refused"))
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    assert (result.total, result.in_window, result.errors) == (2, 2, 1)
    assert len(result.latencies_ns) == 1
    assert 2_000_000 <= result.latencies_ns[0] < 60_000_000_000


def test_publish_side_splits_the_phase_per_hop() -> None:
    publishers = [JobResult(total=600, latencies_ns=[4_000_000, 6_000_000, 5_000_000])]
    publishers.append(JobResult(total=400, latencies_ns=[7_000_000]))
    before = {
        "gateway_publish": (1.0, 100),
        "router_append": (0.5, 100),
        "router_publish": (0.0, 0),
        "storage_append": (0.2, 100),
    }
    after = {
        "gateway_publish": (1.6, 200),  # 0.6 s over 100 calls
        "router_append": (0.9, 200),
        "router_publish": (0.0, 0),  # no direct publishes: left out
        "storage_append": (0.4, 300),
    }
    side = publish_side(publishers, before, after)
    assert side["publish_ack_p50_ms"] == 5.0
    assert side["publish_ack_p99_ms"] == 7.0
    assert side["hops_ms"] == pytest.approx(
        {"gateway_publish": 6.0, "router_append": 4.0, "storage_append": 1.0}
    )
    assert side["messages_per_storage_append"] == 5.0  # 1,000 messages in 200 appends
    assert publish_side([JobResult()], {}, {}) == {}  # JetStream: nothing of it


def test_rows_show_the_publish_side_under_tamtos_latency() -> None:
    summary = {
        "p50_ms": 9.0,
        "p99_ms": 20.0,
        "p999_ms": 30.0,
        "saturated": False,
        "publish_ack_p50_ms": 8.5,
        "hops_ms": {"gateway_publish": 6.0, "router_append": 4.0, "storage_append": 1.0},
        "messages_per_storage_append": 5.0,
        "deliver_side_p50_ms": 0.75,
        "deliver_side_p99_ms": 3.0,
    }
    doc = {"sizes": {"100": {"tamto": {"latency_1000": summary}}}}
    got = {r[0]: r[2] for r in rows(doc)}
    assert got["latency p50 ms @ 1,000/s"] == "9.00"
    assert got["  publish→ack p50 ms @ 1,000/s"] == "8.50"
    assert got["  sequenced→deliver p50 / p99 ms @ 1,000/s"] == "0.75 / 3.00"
    assert got["  server ms gateway/router/storage @ 1,000/s"] == "6.00 / 4.00 / 1.00"
    assert got["  msgs per storage append @ 1,000/s"] == "5.00"


def test_a_message_counts_on_the_deliver_side_from_when_its_router_sequenced_it() -> None:
    result = JobResult()
    # Three messages received at 10 ms, sent at 1 and 2 ms (one before the warm-up's
    # end at 1.5 ms: dropped from both), their batch sequenced at 4 ms.
    result.record(3, True, [1_000_000, 2_000_000, 2_000_000], 10_000_000, 1_500_000, 4_000_000)
    assert result.latencies_ns == [8_000_000, 8_000_000]
    assert result.deliver_side_ns == [6_000_000, 6_000_000]
    result.record(1, True, [2_000_000], 10_000_000, 1_500_000)  # not known: none
    assert len(result.deliver_side_ns) == 2
    summary = latency_summary([result], 1000)
    assert (summary["deliver_side_p50_ms"], summary["deliver_side_p99_ms"]) == (6.0, 6.0)
    assert "deliver_side_p50_ms" not in latency_summary([JobResult()], 1000)  # JetStream
