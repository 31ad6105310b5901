"""The topic matcher against the conformance table, and the topic/pattern rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tamto_common.errors import InvalidArgument
from tamto_gateway.topics import (
    TopicPattern,
    bus_subject,
    check_pattern,
    check_topic,
    topic_of_subject,
)
from tamto_testing.steps import counting_steps
from tests.topic_cases import CASES, WORDS


@pytest.mark.parametrize(("pattern", "topic", "expected"), CASES)
def test_matcher_agrees_with_rabbitmq(pattern: str, topic: str, expected: bool) -> None:
    assert TopicPattern.parse(pattern).matches(topic) is expected


def _nats_matches(filter_: str, subject: str) -> bool:
    """NATS's subject matching: `*` one token, `>` one or more, only last."""
    f, s = filter_.split("."), subject.split(".")
    for i, token in enumerate(f):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(f) == len(s)


@pytest.mark.parametrize(("pattern", "topic", "expected"), CASES)
def test_the_bus_filter_never_hides_a_match(pattern: str, topic: str, expected: bool) -> None:
    """The bus may carry more than a pattern matches, never less."""
    subject = bus_subject("orders.eu", topic)
    assert topic_of_subject(subject) == topic
    if expected:
        assert _nats_matches(TopicPattern.parse(pattern).bus_filter("orders.eu"), subject)


def test_a_filter_without_hash_is_exact() -> None:
    f = TopicPattern.parse("a.*.c").bus_filter("s")
    assert _nats_matches(f, bus_subject("s", "a.x.c"))
    assert not _nats_matches(f, bus_subject("s", "a.x.c.d"))
    assert not _nats_matches(f, bus_subject("t", "a.x.c"))


@pytest.mark.parametrize(
    ("topic", "problem"),
    [
        ("a.b*", "word 2"),
        ("a.#", "word 2"),
        ("a b", "word 1"),
        ("ok.a\x00", r"word 2 .* holds '\\x00' \(U\+0000\)"),
        ("é" * 128, "256 bytes long"),
        ("x" * 256, "at most 255"),
    ],
)
def test_illegal_topics_are_refused_naming_the_problem(topic: str, problem: str) -> None:
    with pytest.raises(InvalidArgument, match=problem):
        check_topic(topic)


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("a.b*", "word 2"),
        ("**", "word 1"),
        ("a.>", "word 2"),
        ("#" * 2, "word 1"),
        ("a." * 128, "at most 255"),
    ],
)
def test_illegal_patterns_are_refused_naming_the_problem(pattern: str, problem: str) -> None:
    with pytest.raises(InvalidArgument, match=problem):
        check_pattern(pattern)


def test_legal_edge_values() -> None:
    assert check_topic("") == ""
    assert check_topic("x" * 255) == "x" * 255
    assert check_topic("é" * 127 + "x") == "é" * 127 + "x"  # 255 bytes
    assert check_pattern("") == ""
    assert check_pattern("#.*.#") == "#.*.#"


def _rabbitmq_takes(word: str) -> bool:
    """A word of a RabbitMQ routing key: any UTF-8 but the separator."""
    return "." not in word


def _nats_takes_token(token: str) -> bool:
    """A NATS subject token for publishing: not empty, no separator, no whitespace
    or NUL, and not a wildcard token."""
    return (
        bool(token)
        and "." not in token
        and not any(c in token for c in " \t\r\n\f\v\x00")
        and token not in ("*", ">")
    )


@pytest.mark.parametrize(("word", "legal"), WORDS)
def test_topic_words_beside_rabbitmq_and_nats(word: str, legal: bool) -> None:
    """A legal word is one RabbitMQ takes in a routing key and, as the bus writes it,
    NATS in a subject; it travels there and back unchanged, and a pattern naming it
    matches it. An illegal one is refused naming the word."""
    topic = f"x.{word}.y"
    if not legal:
        with pytest.raises(InvalidArgument, match="word 2"):
            check_topic(topic)
        if word not in ("*", "#"):  # whole-word wildcards are a pattern's
            with pytest.raises(InvalidArgument, match="word 2"):
                check_pattern(topic)
        return
    assert check_topic(topic) == topic
    assert _rabbitmq_takes(word)
    subject = bus_subject("s", topic)
    assert all(_nats_takes_token(t) for t in subject.split("."))
    assert topic_of_subject(subject) == topic
    pattern = TopicPattern.parse(topic)
    assert pattern.matches(topic)
    assert _nats_matches(pattern.bus_filter("s"), subject)
    assert not _nats_matches(pattern.bus_filter("s"), bus_subject("s", "x.other.y"))


def test_escaped_words_do_not_collide_on_the_bus() -> None:
    """`~` stands for the empty word and `=` ends a subject: words that look like
    them are escaped, so distinct topics get distinct subjects."""
    topics = ["a.", "a.~", "a.~~", "a.=", "a.~=", "a"]
    subjects = [bus_subject("s", t) for t in topics]
    assert len(set(subjects)) == len(topics)
    assert [topic_of_subject(s) for s in subjects] == topics


def _reference(parts: list[str], topic: list[str]) -> bool:
    """RabbitMQ's matching, written plainly: `#` zero or more words, `*` one."""
    if not parts:
        return not topic
    if parts[0] == "#":
        return any(_reference(parts[1:], topic[i:]) for i in range(len(topic) + 1))
    return bool(topic) and parts[0] in ("*", topic[0]) and _reference(parts[1:], topic[1:])


@settings(max_examples=500, derandomize=True, deadline=None)
@given(
    pattern=st.lists(st.sampled_from(["a", "b", "*", "#"]), min_size=1, max_size=7),
    topic=st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=7),
)
def test_matcher_agrees_with_the_plain_definition(pattern: list[str], topic: list[str]) -> None:
    expected = _reference(pattern, topic)
    assert TopicPattern.parse(".".join(pattern)).matches(".".join(topic)) is expected


def test_a_pattern_and_topic_at_their_limits_match_in_few_steps() -> None:
    """The matcher was a Python step per (pattern word, topic word): 128 x 128 for a
    pattern and a topic at their length limits, per subscription per publish."""
    pattern = TopicPattern.parse(".".join(["*"] * 127 + ["#"]))
    topic = ".".join(["a"] * 128)
    with counting_steps("tamto_gateway.topics") as counted:
        assert pattern.matches(topic)
    assert counted.count < 3_000, counted.count
