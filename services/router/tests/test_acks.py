from __future__ import annotations

import random

from tamto_router.acks import AckSet


def test_contiguous_acks_advance_the_floor_and_drop_state() -> None:
    acks = AckSet(floor=10)
    acks.ack_range(12, 14)
    assert acks.floor == 10
    assert acks.ranges == [(12, 14)]
    acks.ack_range(10, 11)
    assert acks.floor == 15
    assert acks.ranges == []


def test_one_gap_costs_one_range_however_many_acks() -> None:
    acks = AckSet(floor=0)
    for offset in range(1, 10_000):
        acks.ack_range(offset, offset)
    assert acks.floor == 0
    assert acks.ranges == [(1, 9_999)]
    assert not acks.is_acked(0)
    assert acks.next_unacked(0) == 0
    assert acks.next_unacked(1) == 10_000


def test_matches_a_set_model_under_random_acks() -> None:
    rng = random.Random(7)
    acks, model = AckSet(floor=0), set()
    for _ in range(2_000):
        first = rng.randrange(0, 300)
        last = first + rng.randrange(0, 5)
        acks.ack_range(first, last)
        model.update(range(first, last + 1))
        expected_floor = 0
        while expected_floor in model:
            expected_floor += 1
        assert acks.floor == expected_floor
        for probe in range(0, 310, 7):
            assert acks.is_acked(probe) == (probe in model)


def test_ack_through_is_cumulative() -> None:
    acks = AckSet(floor=5)
    acks.ack_range(20, 30)
    acks.ack_through(25)
    assert acks.floor == 31
    assert acks.ranges == []
