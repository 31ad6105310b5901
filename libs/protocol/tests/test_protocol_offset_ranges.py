"""Offset ranges come out sorted, with overlapping and touching ones merged."""

from __future__ import annotations

from tamto_protocol.offset_ranges import merge_ranges


def test_overlapping_and_touching_ranges_merge_and_gaps_stay() -> None:
    assert merge_ranges([(10, 12), (0, 3), (4, 5), (2, 2), (7, 8)]) == [(0, 5), (7, 8), (10, 12)]


def test_a_range_inside_another_leaves_it_whole() -> None:
    assert merge_ranges(iter([(0, 9), (3, 4)])) == [(0, 9)]
    assert merge_ranges([]) == []
