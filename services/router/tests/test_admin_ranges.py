"""The offset arithmetic behind describe's backlog and skip."""

from __future__ import annotations

from tamto_router.acks import AckSet
from tamto_router.admin import backlog, skip_ranges


def test_backlog_counts_what_is_not_acked_up_to_the_end() -> None:
    acks = AckSet(4, [(6, 7), (10, 10)])
    assert backlog(acks, 4, 12) == 5  # 4, 5, 8, 9, 11
    assert backlog(acks, 4, 4) == 0
    assert backlog(AckSet(12), 12, 12) == 0


def test_skip_takes_the_next_unacked_offsets_across_gaps() -> None:
    acks = AckSet(4, [(6, 7), (10, 10)])
    assert skip_ranges(acks, 4, 12, 3) == [(4, 5), (8, 8)]
    assert skip_ranges(acks, 4, 12, 100) == [(4, 5), (8, 9), (11, 11)]
    assert skip_ranges(acks, 4, 12, 0) == []
    assert skip_ranges(AckSet(12), 12, 12, 5) == []
