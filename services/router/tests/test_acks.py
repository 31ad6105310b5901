from __future__ import annotations

import itertools
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
    acks, model = AckSet(floor=0), set[int]()
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


def test_unacked_runs_and_next_acked_match_a_set_model() -> None:
    rng = random.Random(11)
    for _ in range(200):
        acks, model = AckSet(floor=rng.randrange(0, 5)), set[int]()
        model.update(range(acks.floor))
        for _ in range(rng.randrange(0, 12)):
            first = rng.randrange(0, 60)
            last = first + rng.randrange(0, 6)
            acks.ack_range(first, last)
            model.update(range(first, last + 1))
        lo, end = rng.randrange(0, 40), rng.randrange(0, 80)
        expected = [o for o in range(lo, end) if o not in model]
        runs = acks.unacked_runs(lo, end)
        assert [o for first, length in runs for o in range(first, first + length)] == expected
        assert all(length > 0 for _, length in runs)
        assert all(a[0] + a[1] < b[0] for a, b in itertools.pairwise(runs))
        nxt = acks.next_acked(lo)
        later = [o for o in model if o >= lo]
        assert nxt == (min(later) if later else None)


def test_next_unacked_hops_over_ranges_that_touch() -> None:
    acks = AckSet(floor=0, ranges=[(5, 7), (8, 9), (10, 10)])  # as a stored cursor may hold
    assert acks.next_unacked(6) == 11
    assert acks.next_unacked(4) == 4
    assert acks.unacked_runs(3, 14) == [(3, 2), (11, 3)]
