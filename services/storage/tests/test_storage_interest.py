"""Interest retention arithmetic: what every subscription acked, and what to drop or rewrite."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tamto_protocol.segment import SegmentEntry
from tamto_storage.interest import (
    AckedByAll,
    ReclaimLimits,
    count_in,
    cursor_spans,
    intersect,
    plan_reclaim,
)
from tamto_storage.model import Cursor, OffsetRange
from tamto_storage.segments import Segment

LIMITS = ReclaimLimits(small_bytes=100, max_run_bytes=10_000)


def cursor(floor: int, *ranges: tuple[int, int]) -> Cursor:
    return Cursor(floor, tuple(OffsetRange(a, b) for a, b in ranges))


def segment(first: int, last: int, *, rows: int | None = None, size: int = 1000) -> Segment:
    count = last - first + 1 if rows is None else rows
    entry = SegmentEntry(0, first, last, count, size, 0, 0, generation=0 if rows is None else 1)
    return Segment(entry, Path(f"segment-{first}-{last}"))


def test_a_cursor_acks_everything_below_its_floor_and_its_ranges() -> None:
    assert cursor_spans(cursor(0)) == []
    assert cursor_spans(cursor(5, (7, 9), (12, 12))) == [(0, 5), (7, 10), (12, 13)]


def test_intersection_keeps_only_offsets_in_both() -> None:
    assert intersect([(0, 10), (20, 30)], [(5, 25)]) == [(5, 10), (20, 25)]
    assert intersect([(0, 10)], [(10, 20)]) == []
    assert intersect([], [(0, 5)]) == []


def test_no_cursor_means_nothing_is_known_to_be_acked() -> None:
    assert AckedByAll.of([]) is None


def test_an_offset_is_needed_while_any_subscription_has_not_acked_it() -> None:
    fast = cursor(100)  # acked 0-99
    slow = cursor(40, (50, 59), (70, 200))  # acked 0-39, 50-59, 70-200
    acked = AckedByAll.of([fast, slow])
    assert acked is not None
    assert acked.spans == ((0, 40), (50, 60), (70, 100))
    assert acked.needed(0, 120) == [(40, 50), (60, 70), (100, 120)]
    assert acked.needed(45, 55) == [(45, 50)]
    assert acked.needed(52, 58) == []
    assert acked.needed(0, 40) == []


def test_a_subscription_that_acked_nothing_keeps_everything() -> None:
    acked = AckedByAll.of([cursor(1_000_000), cursor(0)])
    assert acked is not None
    assert acked.needed(0, 1_000_000) == [(0, 1_000_000)]


def test_without_marks_one_offset_needed() -> None:
    acked = AckedByAll(((0, 10),))
    assert acked.without(9).spans == ((0, 9),)
    assert acked.without(4).needed(0, 10) == [(4, 5)]
    assert acked.without(50).spans == ((0, 10),)


def test_count_in_counts_offsets_inside_spans() -> None:
    offsets = np.array([3, 5, 9, 40], dtype=np.int64)
    assert count_in([(0, 6), (9, 10)], offsets) == 3
    assert count_in([(10, 40)], offsets) == 0
    assert count_in([], offsets) == 0


def test_leading_segments_nobody_needs_are_dropped_whole() -> None:
    segments = [segment(0, 99), segment(100, 199), segment(200, 299)]
    acked = AckedByAll(((0, 200),))
    plan = plan_reclaim(segments, [0, 0, 100], acked, LIMITS)
    assert plan.drop == tuple(segments[:2])
    assert plan.rewrites == ()


def test_a_mostly_acked_run_becomes_one_rewrite_keeping_only_the_needed_offsets() -> None:
    segments = [segment(0, 99), segment(100, 199), segment(200, 299), segment(300, 399)]
    # 5 and 250 unacked; 300-399 all needed.
    acked = AckedByAll(((0, 5), (6, 250), (251, 300)))
    plan = plan_reclaim(segments, [1, 0, 1, 100], acked, LIMITS)
    assert plan.drop == ()
    [rewrite] = plan.rewrites
    assert rewrite.members == tuple(segments[:3])
    assert rewrite.keep == ((5, 6), (250, 251))
    assert (rewrite.first_offset, rewrite.last_offset) == (0, 299)


def test_segments_mostly_still_needed_are_left_alone() -> None:
    segments = [segment(0, 99), segment(100, 199)]
    acked = AckedByAll(((0, 40), (100, 140)))  # 60% of each still needed
    assert not plan_reclaim(segments, [60, 60], acked, LIMITS)


def test_a_small_carried_segment_joins_the_next_reclaimable_run() -> None:
    carried = segment(0, 99, rows=1, size=50)  # offset 5 kept earlier
    segments = [carried, segment(100, 199)]
    acked = AckedByAll(((0, 5), (6, 200)))
    plan = plan_reclaim(segments, [1, 0], acked, LIMITS)
    [rewrite] = plan.rewrites
    assert rewrite.members == tuple(segments)
    assert rewrite.keep == ((5, 6),)


def test_a_carried_segment_that_keeps_exactly_what_is_needed_is_not_rewritten_again() -> None:
    segments = [segment(0, 99, rows=1, size=50), segment(100, 199)]
    acked = AckedByAll(((0, 5), (6, 100)))  # 100-199 all needed
    assert not plan_reclaim(segments, [1, 100], acked, LIMITS)


def test_runs_stop_growing_at_the_size_cap() -> None:
    segments = [segment(i * 100, i * 100 + 99) for i in range(4)]
    acked = AckedByAll(((0, 400),)).without(0).without(100).without(200).without(300)
    tight = ReclaimLimits(small_bytes=0, max_run_bytes=15)  # each keeps 1 row, ~10 bytes
    plan = plan_reclaim(segments, [1, 1, 1, 1], acked, tight)
    assert [len(r.members) for r in plan.rewrites] == [1, 1, 1, 1]
    loose = plan_reclaim(segments, [1, 1, 1, 1], acked, LIMITS)
    assert [len(r.members) for r in loose.rewrites] == [4]


def test_small_sealed_segments_still_needed_never_join_a_run() -> None:
    # Sealed (generation 0), tiny, all needed: rewriting them would only copy them.
    segments = [segment(0, 99), segment(100, 199, size=50), segment(200, 299, size=50)]
    acked = AckedByAll(((0, 100),)).without(5)
    plan = plan_reclaim(segments, [1, 100, 100], acked, LIMITS)
    assert [r.members for r in plan.rewrites] == [(segments[0],)]


def test_a_run_is_rewritten_only_when_it_frees_more_than_it_copies() -> None:
    # A carried segment of 90 bytes, all needed, beside a 100-byte segment that can go:
    # freeing 100 bytes for copying 90 is worth it; beside a 60-byte one it is not.
    carried = segment(0, 99, rows=90, size=90)
    worth = plan_reclaim([carried, segment(100, 199, size=100)], [90, 0], _acked(), LIMITS)
    assert [len(r.members) for r in worth.rewrites] == [2]
    small = plan_reclaim([carried, segment(100, 199, size=60)], [90, 0], _acked(), LIMITS)
    assert not small


def _acked() -> AckedByAll:
    return AckedByAll(((100, 200),))
