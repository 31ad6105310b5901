"""Ephemeral streams as RabbitMQ and NATS users expect them: a connection's order
across topics, and a group as a queue with several bindings, on a real cluster
with two gateways (the producer on the first, most subscribers on the second).
"""

from __future__ import annotations

import asyncio

import pytest

import tamto_sdk
from tamto_testing.waiting import eventually
from tests.e2e.test_ephemeral import clients, collect, ephemeral, two_gateways

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
                await producer.publish(payload, topic=topic)
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
