"""MQTT topics onto Tamto streams (the rule) and MQTT's filter matching."""

from __future__ import annotations

import pytest

from tamto_common.config import load_config
from tamto_common.errors import ConfigError, InvalidArgument
from tamto_gateway.config import GatewayConfig
from tamto_gateway.mqtt.topics import TopicRule, check_filter, matches


def test_the_first_level_names_the_stream() -> None:
    address = TopicRule().topic("orders/eu/created")
    assert (address.stream, address.key, address.ephemeral_topic) == (
        "orders",
        b"eu/created",
        "eu.created",
    )
    bare = TopicRule().topic("orders")
    assert (bare.key, bare.ephemeral_topic) == (None, "")


def test_more_stream_levels() -> None:
    address = TopicRule(2).topic("plant/line1/temp")
    assert (address.prefix, address.stream, address.rest) == (
        "plant/line1",
        "plant.line1",
        ("temp",),
    )
    with pytest.raises(InvalidArgument, match="first 2 level"):
        TopicRule(2).topic("plant")


@pytest.mark.parametrize("topic_filter", ["+/a", "#", "a+/b", "a/#/b", "a/b#", ""])
def test_bad_or_stream_spanning_filters(topic_filter: str) -> None:
    with pytest.raises(InvalidArgument):
        TopicRule().filter(topic_filter)


def test_filters_as_ephemeral_patterns() -> None:
    assert TopicRule().filter("q/+/b/#").ephemeral_pattern.text == "*.b.#"
    assert TopicRule().filter("q").ephemeral_pattern.text == ""


def test_a_level_an_ephemeral_topic_cannot_carry_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        _ = TopicRule().topic("q/a b").ephemeral_topic


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("#", "", True),
        ("#", "a/b", True),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("+", "a", True),
        ("+", "", False),  # "" here: no level after the stream's
        ("+", "a/b", False),
        ("a/+/c", "a/b/c", True),
        ("a/+/c", "a//c", True),
        ("a/+", "a", False),
        ("a/b", "a/b", True),
        ("a/b", "a/b/c", False),
    ],
)
def test_matching(topic_filter: str, topic: str, expected: bool) -> None:
    check_filter(topic_filter)
    filter_levels = tuple(topic_filter.split("/"))
    topic_levels = tuple(topic.split("/")) if topic else ()
    assert matches(filter_levels, topic_levels) is expected


def test_delivered_topics() -> None:
    rule = TopicRule()
    assert rule.delivered_topic("orders", "eu/created", "/") == "orders/eu/created"
    assert rule.delivered_topic("orders", "eu.created", ".") == "orders/eu/created"
    assert rule.delivered_topic("orders", None, "/") == "orders"


def test_a_single_stream_takes_every_topic_whole_as_its_key() -> None:
    rule = TopicRule(single_stream="mqtt")
    for topic in ("TopicA", "/TopicA", "TopicA/B", "a//b", "$x/y"):
        address = rule.topic(topic)
        assert (address.stream, address.key) == ("mqtt", topic.encode())
    for topic_filter in ("#", "+/+", "/#", "+"):
        assert rule.filter(topic_filter).rest == tuple(topic_filter.split("/"))
    assert rule.delivered_topic("", "/TopicA", "/") == "/TopicA"
    assert rule.delivered_topic("", None, "/") == "mqtt"  # keyless, published by other means


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("#", "TopicA/B", True),
        ("#", "/TopicA", True),
        ("/#", "/TopicA", True),
        ("/#", "TopicA", False),
        ("+/+", "/TopicA", True),  # `+` matches the empty first level
        ("+/+", "TopicA/B", True),
        ("+/+", "TopicA", False),
        ("TopicA/+", "TopicA/B", True),
        ("TopicA/+", "TopicA", False),
        ("#", "$SYS/x", False),  # MQTT-4.7.2-1
        ("+/x", "$SYS/x", False),
        ("$SYS/#", "$SYS/x", True),
    ],
)
def test_single_stream_matching(topic_filter: str, topic: str, expected: bool) -> None:
    rule = TopicRule(single_stream="mqtt")
    levels = rule.topic_levels(topic)
    assert rule.matches(rule.filter(topic_filter).rest, levels) is expected


def test_leading_wildcards_match_dollar_levels_below_a_stream() -> None:
    rule = TopicRule()
    assert rule.matches(rule.filter("s/#").rest, rule.topic_levels("$x/y"))


def test_the_single_stream_setting_must_name_a_stream() -> None:
    env = {"TAMTO_GATEWAY_MQTT_STREAM": "mqtt"}
    assert load_config(GatewayConfig, "gateway", [], environ=env).mqtt_stream == "mqtt"
    assert load_config(GatewayConfig, "gateway", [], environ={}).mqtt_stream == ""
    with pytest.raises(ConfigError, match="mqtt-stream"):
        load_config(GatewayConfig, "gateway", ["--mqtt-stream", "a b"], environ={})
