"""term and in_progress on one subscription, against in-memory storage."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from test_subscription import (
    batch,
    dead_letter_rows,
    next_delivery,
    nothing_within,
    offsets,
    payloads_of,
    slot_with_credit,
    subscription,
)

from tamto_common.errors import InvalidArgument
from tamto_router.subscription import SubscriptionType


async def test_term_dead_letters_at_once_with_its_reason_and_acks() -> None:
    dead: list[tuple[str, bytes, int]] = []
    sub = subscription([batch(0, 3)], ack_timeout_s=0.2, dead=dead)
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    assert offsets(await next_delivery(slot)) == [0, 1, 2]
    await sub.ack([(0, 0), (2, 2)], slot)
    await asyncio.wait_for(sub.term([(1, 1)], "bad schema", slot), 5)
    (stream, data, count) = dead[0]
    assert (stream, count, payloads_of(data)) == ("s.dlq", 1, [b"m1"])
    (headers,) = dead_letter_rows(data)
    assert headers["tamto.dlq.reason"] == "term: bad schema"
    assert headers["tamto.dlq.delivery_count"] == "1"
    assert sub.acks.floor == 3, "the termed message is acked"
    assert await nothing_within(slot, 0.6), "never redelivered past its ack timeout"
    await sub.close()


async def test_term_leaves_what_another_consumer_holds_alone() -> None:
    dead: list[tuple[str, bytes, int]] = []
    sub = subscription([batch(0, 2), batch(2, 2)], dead=dead)
    a, b = slot_with_credit("a", 2), slot_with_credit("b", 2)
    sub.attach(a, SubscriptionType.SHARED)
    sub.attach(b, SubscriptionType.SHARED)
    got_a, got_b = await next_delivery(a), await next_delivery(b)
    await sub.term([(0, 3)], "", a)
    assert [payloads_of(d) for _, d, _ in dead] == [[f"m{o}".encode() for o in offsets(got_a)]]
    assert dead_letter_rows(dead[0][1])[0]["tamto.dlq.reason"] == "term"
    assert all(not sub.acks.is_acked(o) for o in offsets(got_b))
    await sub.close()


async def test_term_refuses_an_overlong_reason() -> None:
    sub = subscription([batch(0, 1)], dead=[])
    with pytest.raises(InvalidArgument, match="at most 1024"):
        await sub.term([(0, 0)], "r" * 1025)
    await sub.close()


async def test_in_progress_restarts_the_ack_timeout_of_only_what_it_names() -> None:
    sub = subscription([batch(0, 2)], ack_timeout_s=0.5)
    slot = slot_with_credit()
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    await next_delivery(slot)
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.2
    redelivered: list[list[int]] = []
    while loop.time() < until:
        sub.in_progress([(0, 0)], slot)
        with contextlib.suppress(TimeoutError):
            redelivered.append(offsets(await next_delivery(slot, within_s=0.1)))
    assert [1] in redelivered, "offset 1, not marked, came back after its timeout"
    assert all(0 not in o for o in redelivered), redelivered
    await sub.close()
