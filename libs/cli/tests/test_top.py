"""`tamto top`'s view from two samples of the members' metrics: rates over the interval,
backlog per subscription summed over routers, latency quantiles of what was observed in
the interval, members' health; rendered as tables and as JSON."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from rich.console import Console

from tamto_cli.top import Sample, as_json, build_view, parse, quantile, render, run_top
from tamto_common.membership import Member


def member(service: str, instance: str) -> Member:
    return Member(service, instance, f"{instance}:1", f"{instance}:2", "0.1", 1, 0.0)


ROUTER_1, ROUTER_2, GATEWAY = member("router", "r1"), member("router", "r2"), member("gateway", "g")


def router_page(messages_in: int, backlog: int, age: float) -> str:
    return f"""
# TYPE tamto_router_stream_messages counter
tamto_router_stream_messages_total{{stream="orders",direction="in"}} {messages_in}
tamto_router_stream_messages_total{{stream="orders",direction="out"}} {messages_in // 2}
# TYPE tamto_router_stream_bytes counter
tamto_router_stream_bytes_total{{stream="orders",direction="in"}} {messages_in * 100}
# TYPE tamto_subscription_backlog_messages gauge
tamto_subscription_backlog_messages{{stream="orders",subscription="billing"}} {backlog}
# TYPE tamto_subscription_oldest_unacked_age_seconds gauge
tamto_subscription_oldest_unacked_age_seconds{{stream="orders",subscription="billing"}} {age}
# TYPE tamto_subscription_metrics_folded gauge
tamto_subscription_metrics_folded 0
# TYPE tamto_event_loop_lag_max_seconds gauge
tamto_event_loop_lag_max_seconds 0.004
"""


def gateway_page(fast: int, slow: int) -> str:
    return f"""
# TYPE tamto_gateway_publish_ack_seconds histogram
tamto_gateway_publish_ack_seconds_bucket{{le="0.005"}} {fast}
tamto_gateway_publish_ack_seconds_bucket{{le="0.01"}} {fast + slow}
tamto_gateway_publish_ack_seconds_bucket{{le="+Inf"}} {fast + slow}
tamto_gateway_publish_ack_seconds_count {fast + slow}
tamto_gateway_publish_ack_seconds_sum 0
"""


def sample(at: float, pages: dict[Member, str], health: str = "SERVING") -> Sample:
    members = [(m, health) for m in pages]
    return Sample(at, members, {m.key: parse(page) for m, page in pages.items() if page})


def test_the_view_takes_rates_and_latency_over_the_interval() -> None:
    before = sample(
        10.0,
        {
            ROUTER_1: router_page(1000, 5, 3.0),
            ROUTER_2: router_page(500, 7, 1.0),
            GATEWAY: gateway_page(10_000, 0),
        },
    )
    after = sample(
        12.0,
        {
            ROUTER_1: router_page(1200, 6, 4.0),
            ROUTER_2: router_page(600, 9, 9.0),
            GATEWAY: gateway_page(10_000, 100),  # the interval's publishes were all slow
        },
    )
    view = build_view(before, after)
    (orders,) = view.streams
    assert orders.messages_in_per_s == 150  # (200 + 100) / 2 s
    assert orders.messages_out_per_s == 75
    assert orders.bytes_in_per_s == 15_000
    (billing,) = view.subscriptions
    assert (billing.backlog_messages, billing.oldest_unacked_age_seconds) == (15, 9.0)
    p50 = view.latency_s["publish_to_ack"]["p50"]
    assert p50 is not None
    assert 0.005 < p50 <= 0.01, "the interval's publishes, not those since the start"
    assert view.latency_s["publish_to_first_delivery"] == {"p50": None, "p99": None}
    assert [(n.service, n.instance, n.scraped) for n in view.nodes] == [
        ("gateway", "g", True),
        ("router", "r1", True),
        ("router", "r2", True),
    ]
    assert json.loads(json.dumps(as_json(view)))["subscriptions"][0]["backlog_messages"] == 15


def test_a_restarted_member_s_reset_counters_count_as_no_traffic() -> None:
    before = sample(0.0, {ROUTER_1: router_page(1000, 0, 0)})
    after = sample(1.0, {ROUTER_1: router_page(10, 0, 0)})
    assert build_view(before, after).streams[0].messages_in_per_s == 0


def test_an_unreachable_member_is_shown_as_such() -> None:
    view = build_view(sample(0.0, {GATEWAY: ""}), sample(1.0, {GATEWAY: ""}, "UNREACHABLE"))
    (node,) = view.nodes
    assert (node.health, node.scraped, node.event_loop_lag_max_s) == ("UNREACHABLE", False, None)
    out = io.StringIO()
    Console(file=out, width=160).print(render(view))
    assert "UNREACHABLE" in out.getvalue()
    assert "unreachable" in out.getvalue()


def test_quantiles_interpolate_within_buckets() -> None:
    assert quantile(0.5, [(0.1, 0), (0.2, 10), (float("inf"), 10)]) == pytest.approx(0.15)
    assert quantile(0.99, [(0.1, 0), (float("inf"), 5)]) == 0.1
    assert quantile(0.5, [(0.1, 0), (float("inf"), 0)]) is None


async def test_the_live_view_refreshes_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[float] = []

    async def fake_sample(etcd: str) -> Sample:
        taken.append(float(len(taken)))
        return sample(taken[-1], {ROUTER_1: router_page(100 * len(taken), 5, 1.0)})

    monkeypatch.setattr("tamto_cli.top.take_sample", fake_sample)
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=True)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(run_top("etcd", 0.05, console), 1.0)
    assert len(taken) >= 3, "sampled again and again"
    text = out.getvalue()
    assert text.count("Backlog per subscription") >= 2
    assert "\x1b[2K" in text, "earlier frames erased: refreshed in place, not appended"
