"""Ephemeral streams as RabbitMQ and NATS users expect them: a producer's order
across topics, a group as a queue with several bindings, and topic words of any
UTF-8 but separators, wildcards, whitespace and control characters, on a real
cluster with two gateways (the producer on the first, most subscribers on the
second).
"""

from __future__ import annotations

import asyncio

import pytest

import tamto_sdk
from tamto_gateway.topics import TopicPattern
from tamto_sdk.errors import InvalidArgument
from tamto_testing.waiting import eventually
from tests.e2e.test_ephemeral import clients, collect, ephemeral, two_gateways
from tests.topic_cases import WORDS

pytestmark = pytest.mark.e2e

__all__ = ["clients", "two_gateways"]  # fixtures

TOPICS = ["orders.eu", "orders.us", "payments.eu", "audit", "orders.eu.refunds"]


async def test_one_producers_messages_keep_their_order_whatever_their_topics(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """500 messages queued by one producer over five topics: a `#` subscriber on
    each gateway, and an `orders.#` one, get them in publish order."""
    one, two = clients
    stream = await ephemeral(one)
    subs = [
        await two.subscribe(stream).start(),
        await one.subscribe(stream).start(),
        await two.subscribe(stream, match="orders.#").start(),
    ]
    got: list[list[bytes]] = [[] for _ in subs]
    readers = [asyncio.create_task(collect(s, g)) for s, g in zip(subs, got, strict=True)]
    count = 500
    sent = [(TOPICS[i % len(TOPICS)], b"%d" % i) for i in range(count)]
    try:
        async with one.ephemeral_producer(stream) as producer:
            for topic, payload in sent:
                await producer.send(payload, topic=topic)
                if payload.endswith(b"7"):
                    await asyncio.sleep(0)  # let batches go out mid-stream, as a live producer does
        orders = [p for t, p in sent if t.startswith("orders.")]
        await eventually(
            lambda: len(got[0]) >= count and len(got[1]) >= count and len(got[2]) >= len(orders),
            30,
            "every subscriber got its messages",
        )
    finally:
        for reader in readers:
            reader.cancel()
    everything = [p for _, p in sent]
    assert got[0] == everything
    assert got[1] == everything
    assert got[2] == orders


async def test_a_group_with_several_bindings_gets_each_message_once(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """A group is a queue whose bindings are its members' patterns, as a RabbitMQ
    queue bound twice: members on both gateways with overlapping patterns get each
    matching message once between them, each only what its own pattern matches."""
    one, two = clients
    stream = await ephemeral(one)
    bindings = {"orders.#": two, "*.eu": two, "#.refunds": one}
    members = [await c.subscribe(stream, match=p, group="g").start() for p, c in bindings.items()]
    got: list[list[tuple[str, bytes]]] = [[] for _ in members]

    async def read(sub: tamto_sdk.EphemeralSubscription, into: list[tuple[str, bytes]]) -> None:
        async for message in sub:
            into.append((message.topic, message.payload))

    readers = [asyncio.create_task(read(s, g)) for s, g in zip(members, got, strict=True)]
    sent = [(TOPICS[i % len(TOPICS)], b"%d" % i) for i in range(100)]
    matching = [
        (t, p)
        for t, p in sent
        if any(TopicPattern.parse(pattern).matches(t) for pattern in bindings)
    ]
    try:
        async with one.ephemeral_producer(stream) as producer:
            for topic, payload in sent:
                await producer.send(payload, topic=topic)
        await eventually(
            lambda: sum(map(len, got)) >= len(matching), 30, "the group got every match"
        )
        # Messages no binding matches ("audit") reach nobody: publish one that every
        # binding matches last, and nothing else may arrive before it.
        async with one.ephemeral_producer(stream) as producer:
            await producer.send(b"last", topic="orders.eu.refunds")
        await eventually(lambda: sum(map(len, got)) > len(matching), 30, "the last one")
    finally:
        for reader in readers:
            reader.cancel()
    everything = sorted(m for g in got for m in g)
    assert everything == sorted([*matching, ("orders.eu.refunds", b"last")])  # each once
    for pattern, received in zip(bindings, got, strict=True):
        assert all(TopicPattern.parse(pattern).matches(t) for t, _ in received), pattern


async def test_topic_words_of_any_utf8_travel_across_gateways(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """Every legal word of the table (`tests/topic_cases.py`) in a topic published on
    gateway one reaches a subscriber on gateway two whose pattern names it, and
    only that one; an illegal word is refused naming it."""
    one, two = clients
    stream = await ephemeral(one)
    legal = [w for w, ok in WORDS if ok]
    subs = [await two.subscribe(stream, match=f"w.{w}.#").start() for w in legal]
    got: list[list[tuple[str, bytes]]] = [[] for _ in subs]

    async def read(sub: tamto_sdk.EphemeralSubscription, into: list[tuple[str, bytes]]) -> None:
        async for message in sub:
            into.append((message.topic, message.payload))

    readers = [asyncio.create_task(read(s, g)) for s, g in zip(subs, got, strict=True)]
    try:
        async with one.ephemeral_producer(stream) as producer:
            for i, word in enumerate(legal):
                await producer.send(b"%d" % i, topic=f"w.{word}.end")
        await eventually(lambda: all(got), 30, "every word's subscriber got its message")
        async with one.ephemeral_producer(stream) as producer:
            for word, ok in WORDS:
                if not ok:
                    with pytest.raises(InvalidArgument, match="word 2"):
                        await producer.send_batch([b"x"], topic=f"w.{word}")
    finally:
        for reader in readers:
            reader.cancel()
    assert got == [[(f"w.{w}.end", b"%d" % i)] for i, w in enumerate(legal)]
