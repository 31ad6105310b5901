"""One consume request's cost grows as O(n log n) in its ranges, never O(n^2).

An ack naming n disjoint ranges used to cost a pass over the ranges held per
range acked: 16,000 ranges held a router's event loop about 14 s, and a
publish on another stream waited that long. These tests count the Python steps
(`tamto_testing.steps`) each verb takes for n and 4n disjoint ranges, against
subscriptions holding about as many acked ranges and runs in flight.
"""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
from test_subscription import batch, next_delivery, nothing_within, slot_with_credit, subscription

from tamto_common.errors import InvalidArgument, ResourceExhausted
from tamto_protocol.limits import MAX_RANGES_PER_REQUEST
from tamto_protocol.v1 import messages_pb2
from tamto_router import grpc_api
from tamto_router import subscription as subscription_module
from tamto_router.acks import AckSet
from tamto_router.consume import ConsumeSession
from tamto_router.runs import Run
from tamto_router.subscription import ConsumerSlot, Delivery, Subscription, SubscriptionType
from tamto_testing.hostile_requests import disjoint_ranges
from tamto_testing.steps import counting_steps, growth
from tamto_testing.waiting import eventually

#: n log n grows 4.8 times from 1,000 to 4,000; n^2 16 times. The margin is for
#: the constant parts of a call.
MAX_GROWTH = 6.5
SMALL, LARGE = 1_000, 4_000


def disjoint(n: int, start: int = 0) -> list[tuple[int, int]]:
    """n one-offset ranges with a gap between each two: (start, start), (start + 2, ...)."""
    return [(start + 2 * i, start + 2 * i) for i in range(n)]


def test_acking_n_disjoint_ranges_in_one_call_costs_n_log_n() -> None:
    def steps(n: int) -> int:
        acks = AckSet(0)
        acks.ack_ranges(disjoint(n, 1))  # n ranges held
        with counting_steps("tamto_router") as counted:
            acks.ack_ranges(disjoint(n, 2 * n + 1))  # n more, above them
        assert len(acks.ranges) == 2 * n
        return counted.count

    assert growth(steps(SMALL), steps(LARGE)) < MAX_GROWTH


def test_acking_ranges_one_at_a_time_costs_log_n_each() -> None:
    def steps(n: int) -> int:
        acks = AckSet(0)
        ranges = disjoint(2 * n, 1)
        acks.ack_ranges(ranges[::2])
        with counting_steps("tamto_router") as counted:
            for first, last in ranges[1::2]:
                acks.ack_range(first, last)
        assert acks.ranges == ranges
        return counted.count

    assert growth(steps(SMALL), steps(LARGE)) < MAX_GROWTH


def test_ack_ranges_matches_a_set_model() -> None:
    import random

    rng = random.Random(31)
    acks, model = AckSet(floor=5), set(range(5))
    for _ in range(500):
        ranges = []
        for _ in range(rng.randrange(0, 6)):
            first = rng.randrange(0, 400)
            ranges.append((first, first + rng.randrange(-1, 6)))
        acks.ack_ranges(ranges)
        model.update(o for first, last in ranges for o in range(first, last + 1))
        floor = 0
        while floor in model:
            floor += 1
        assert acks.floor == floor
        assert all(acks.is_acked(o) == (o in model) for o in range(0, 420))
        assert all(a[1] + 1 < b[0] for a, b in zip(acks.ranges, acks.ranges[1:], strict=False))


def _with_runs_in_flight(n: int, kind: SubscriptionType) -> tuple[Subscription, int]:
    """A subscription of 8n messages with n one-offset runs in flight to a consumer
    (every fourth offset) and n acked ranges held (every other odd offset)."""
    sub = subscription([batch(0, 8 * n)])
    slot = slot_with_credit(credit=0)
    sub.attach(slot, kind)
    due = time.monotonic() + 60
    sub.in_flight = [Run(4 * i, 4 * i, 1, due, slot.id) for i in range(n)]
    sub.acks.ack_ranges([(4 * i + 1, 4 * i + 1) for i in range(n)])
    return sub, slot.id


async def test_each_verb_with_n_disjoint_ranges_costs_n_log_n() -> None:
    async def steps(n: int, verb: str, kind: SubscriptionType) -> int:
        sub, slot_id = _with_runs_in_flight(n, kind)
        slot = next(s for s in sub.consumers if s.id == slot_id)
        ranges = [(4 * i, 4 * i) for i in range(n)]  # every run in flight, one range each
        with counting_steps("tamto_router") as counted:
            if verb == "ack":
                await sub.ack(ranges, slot)
            elif verb == "nack":
                sub.nack(ranges, 60.0, slot)
            else:
                sub.in_progress(ranges, slot)
        if verb == "ack":
            assert sub.acks.floor == 2, "0 and 1 acked; 2 never was"
            assert not sub.in_flight
        else:
            assert len(sub.in_flight if verb == "in_progress" else sub.pending) == n
        await sub.close()
        return counted.count

    for kind in (SubscriptionType.EXCLUSIVE, SubscriptionType.SHARED, SubscriptionType.KEY_SHARED):
        for verb in ("ack", "nack", "in_progress"):
            small, large = await steps(SMALL, verb, kind), await steps(LARGE, verb, kind)
            assert growth(small, large) < MAX_GROWTH, (kind, verb, small, large)


async def test_acks_that_would_keep_too_many_ranges_are_refused_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(subscription_module, "MAX_ACKED_RANGES", 10)
    sub = subscription([batch(0, 100)])
    slot = slot_with_credit(credit=0)
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    await sub.ack(disjoint(10, 1), slot)
    assert len(sub.acks.ranges) == 10
    with pytest.raises(ResourceExhausted, match="would hold 12 acked ranges above its ack floor 0"):
        await sub.ack(disjoint(2, 41), slot)
    assert sub.acks.ranges == disjoint(10, 1), "nothing of a refused ack is applied"
    await sub.ack([(0, 0), (2, 2)], slot)  # closing gaps is always taken
    assert (sub.acks.floor, len(sub.acks.ranges)) == (4, 8)
    await sub.ack(disjoint(2, 41))  # the router's own acks (retention, dead letters): no limit
    assert len(sub.acks.ranges) == 10
    await sub.close()


async def test_redelivering_n_nacked_runs_costs_n_log_n() -> None:
    """A nack of n disjoint ranges leaves n runs pending; handing them out again
    took a pass over every pending run per run (O(n^2))."""

    async def steps(n: int) -> int:
        sub = subscription([batch(0, 2 * n)])
        slot = slot_with_credit(credit=2 * n)
        sub.attach(slot, SubscriptionType.SHARED)
        assert sum(d.batch.count for d in await deliveries(slot, 2 * n)) == 2 * n
        with counting_steps("tamto_router") as counted:
            sub.nack(disjoint(n), 0.0, slot)
            slot.credit.grant(n)
            sub.poke()
            again = await deliveries(slot, n)
        assert sorted(d.batch.base_offset for d in again) == [2 * i for i in range(n)]
        await sub.close()
        return counted.count

    assert growth(await steps(SMALL // 2), await steps(LARGE // 2)) < MAX_GROWTH


async def deliveries(slot: ConsumerSlot, messages: int) -> list[Delivery]:
    """Deliveries from `slot`'s outbox until they hold `messages` messages."""
    got: list[Delivery] = []
    while sum(d.batch.count for d in got) < messages:
        got.append(await next_delivery(slot, within_s=60))
    return got


class _Untouched:
    """A consume session no request may reach."""

    def __getattr__(self, name: str) -> Any:
        def called(*args: Any) -> None:
            raise AssertionError(f"the session's {name} was called")

        return called


@pytest.mark.parametrize("verb", ["ack", "nack", "term", "in_progress"])
async def test_the_router_refuses_a_verb_over_the_range_limit_before_any_work(verb: str) -> None:
    over = disjoint_ranges(MAX_RANGES_PER_REQUEST + 1)
    request = messages_pb2.ConsumeRequest()
    getattr(request, verb).ranges.extend(over)
    with pytest.raises(InvalidArgument, match=f"{verb}.ranges has 10001 elements; at most 10000"):
        await grpc_api._apply(request, cast(ConsumeSession, _Untouched()))


async def test_dead_lettering_n_runs_over_max_deliveries_costs_n_log_n() -> None:
    """Runs over max_deliveries were found and acked one per round, each round a
    pass over every run pending (O(n^2)); now all in one pass and one ack."""

    async def steps(n: int) -> int:
        dead: list[tuple[str, bytes, int]] = []
        sub = subscription([batch(0, 2 * n)], dead=dead, max_deliveries=1)
        slot = slot_with_credit(credit=2 * n)
        sub.attach(slot, SubscriptionType.SHARED)
        await deliveries(slot, 2 * n)
        with counting_steps("tamto_router") as counted:
            sub.nack(disjoint(n), 0.0, slot)  # each run's first delivery was its last
            await eventually(lambda: len(dead) == n, 120, "every nacked run dead-lettered")
            await eventually(lambda: sub.acks.floor == 1, 10, "the dead-lettered runs acked")
        assert sub.acks.ranges == [(2 * i, 2 * i) for i in range(1, n)]
        await sub.close()
        return counted.count

    assert growth(await steps(SMALL // 4), await steps(LARGE // 4)) < MAX_GROWTH


async def test_terming_n_runs_in_flight_costs_n_log_n() -> None:
    """A term of n runs in flight acked each run as it was dead-lettered, each ack a
    pass over every run in flight (O(n^2)); now one ack for all."""

    async def steps(n: int) -> int:
        dead: list[tuple[str, bytes, int]] = []
        sub = subscription([batch(0, 2 * n)], dead=dead)
        slot = slot_with_credit(credit=2 * n)
        sub.attach(slot, SubscriptionType.SHARED)
        await deliveries(slot, 2 * n)
        with counting_steps("tamto_router") as counted:
            await sub.term(disjoint(n), "bad", slot)
        assert len(dead) == n
        assert (sub.acks.floor, len(sub.acks.ranges)) == (1, n - 1)
        await sub.close()
        return counted.count

    assert growth(await steps(SMALL // 4), await steps(LARGE // 4)) < MAX_GROWTH


async def test_a_batch_cut_by_acks_goes_to_an_exclusive_consumer_only_as_its_credit_allows() -> (
    None
):
    """Without a budget a whole batch may overdraw the credit; a batch that acks cut
    into n pieces was n deliveries at once, whatever the credit."""
    n = 2_000
    sub = subscription([batch(0, 2 * n)])
    await sub.ack([(2 * i + 1, 2 * i + 1) for i in range(n)])  # n gaps: n pieces
    slot = slot_with_credit(credit=10)
    sub.attach(slot, SubscriptionType.EXCLUSIVE)
    got = [await next_delivery(slot) for _ in range(10)]
    assert [d.batch.base_offset for d in got] == [2 * i for i in range(10)]
    assert await nothing_within(slot, 0.3), "nothing past the credit"
    slot.credit.grant(5)
    sub.poke()
    more = [await next_delivery(slot) for _ in range(5)]
    assert [d.batch.base_offset for d in more] == [2 * i for i in range(10, 15)]
    await sub.close()
