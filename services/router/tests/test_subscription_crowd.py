"""Crowds on one subscription: attach and detach cost O(log n), describing one O(n),
the limit refuses the excess.

A ring rebuilt over all consumers on every attach and detach made
1,000 consumers stall the router for minutes. These tests measure the cost of
the last consumers against the first ones, so they fail when a change costs
O(n) (or worse) again, without depending on the machine's speed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from test_subscription import MemoryLog, batch, next_delivery, offsets

from tamto_common.errors import ResourceExhausted
from tamto_router.acks import AckSet
from tamto_router.admin import SubscriptionAdmin
from tamto_router.dead_letters import Policy
from tamto_router.runs import Run
from tamto_router.subscription import ConsumerSlot, Subscription, SubscriptionType


def subscription(max_consumers: int = 0) -> Subscription:
    log: object = MemoryLog([batch(0, 4)])
    return Subscription(
        log,  # type: ignore[arg-type]
        "sub",
        AckSet(0),
        Policy(ack_timeout_s=30.0),
        1000,
        max_consumers=max_consumers,
    )


def slot(name: str, credit: int = 0) -> ConsumerSlot:
    s = ConsumerSlot(name)
    s.credit.grant(credit)
    return s


def seconds_per_change(
    sub: Subscription, kind: SubscriptionType, slots: list[ConsumerSlot]
) -> float:
    began = time.perf_counter()
    for s in slots:
        sub.attach(s, kind)
    for s in slots:
        sub.detach(s)
    return (time.perf_counter() - began) / (2 * len(slots))


@pytest.mark.parametrize("kind", [SubscriptionType.SHARED, SubscriptionType.KEY_SHARED])
async def test_attach_and_detach_cost_does_not_grow_with_the_crowd(kind: SubscriptionType) -> None:
    sub = subscription()
    probe = 200
    alone = seconds_per_change(sub, kind, [slot(f"p{i}", 1) for i in range(probe)])
    crowd = [slot(f"c{i}", 1) for i in range(5_000)]
    for s in crowd:
        sub.attach(s, kind)
    amid = seconds_per_change(sub, kind, [slot(f"q{i}", 1) for i in range(probe)])
    # O(n) per change would make `amid` ~25x `alone` (5,000 vs 200); the rebuilt ring ~100x.
    assert amid < 8 * alone + 0.0002, (alone, amid)
    for s in crowd:
        sub.detach(s)
    assert not sub.consumers
    await sub.close()


async def test_a_shared_crowd_without_credit_still_lets_the_one_with_credit_receive() -> None:
    sub = subscription()
    for i in range(3_000):
        sub.attach(slot(f"idle{i}"), SubscriptionType.SHARED)
    ready = slot("ready")
    sub.attach(ready, SubscriptionType.SHARED)
    ready.credit.grant(4)
    sub.poke()
    assert offsets(await next_delivery(ready)) == [0, 1, 2, 3]
    await sub.close()


async def test_consumers_over_the_limit_are_refused_naming_it() -> None:
    sub = subscription(max_consumers=2)
    a, b = slot("a"), slot("b")
    sub.attach(a, SubscriptionType.SHARED)
    sub.attach(b, SubscriptionType.SHARED)
    with pytest.raises(ResourceExhausted, match="max_consumers_per_subscription=2"):
        sub.attach(slot("c"), SubscriptionType.SHARED)
    sub.detach(a)
    sub.attach(slot("d"), SubscriptionType.SHARED)  # room again once one left
    await sub.close()


class _NothingStored:
    """What `SubscriptionAdmin._describe` asks storage, answered without it."""

    start = 0

    async def bytes_of(self, messages: int) -> int:
        return 0

    async def publish_time(self, offset: int) -> int:
        return 0


class _Walked(list[Run]):
    """Runs in flight that count the passes over them."""

    passes = 0

    def __iter__(self) -> Iterator[Run]:
        self.passes += 1
        return super().__iter__()


async def test_describing_a_crowd_walks_its_runs_in_flight_once() -> None:
    """Describe (and every metrics sample, `subscription_metrics`) counted each
    consumer's messages in flight with a pass over all runs in flight: O(n^2) on
    the event loop for n consumers holding a run each (4,000 consumers: 3.2 s on
    the loaded development machine, where 400 took 0.04 s)."""
    n = 1_000
    log = MemoryLog([batch(0, n)])
    sub = Subscription(log, "sub", AckSet(0), Policy(ack_timeout_s=30.0), 1000)  # type: ignore[arg-type]
    log.subscriptions["sub"] = sub
    slots = [slot(f"c{i}") for i in range(n)]
    for s in slots:
        sub.attach(s, SubscriptionType.SHARED)
    runs = _Walked(Run(i, i, 1, time.monotonic() + 30, s.id) for i, s in enumerate(slots))
    sub.in_flight = runs
    admin = SubscriptionAdmin(cast(Any, None), cast(Any, SimpleNamespace(addresses={})), "r")
    state = await admin._describe(cast(Any, log), "sub", cast(Any, _NothingStored()))
    assert runs.passes == 1, f"{runs.passes} passes over the runs for {n} consumers"
    assert state.unacked == n
    assert [c.unacked for c in state.consumers] == [1] * n
    await sub.close()
