from __future__ import annotations

import pyarrow as pa

from tamto_router.dedup import DedupWindow, message_offsets


def ids(*values: str | None) -> pa.Array:
    return pa.array(values, type=pa.string())


def test_batches_without_ids_skip_the_check() -> None:
    window = DedupWindow(60_000_000)
    plan = window.plan(ids(None, None), now_us=0)
    assert plan.keep is None
    assert plan.kept == 2


def test_seen_ids_are_duplicates_answered_with_their_original_offset() -> None:
    window = DedupWindow(60_000_000)
    window.record(ids("a", "b", None), [10, 11, 12], time_us=1_000)
    plan = window.plan(ids("b", "c", None, "a"), now_us=2_000)
    assert plan.keep is not None
    assert plan.keep.to_pylist() == [False, True, True, False]
    assert plan.kept == 2
    assert message_offsets(plan, 4, base=20) == [11, 20, 21, 10]


def test_repeats_within_one_batch_keep_the_first_copy() -> None:
    window = DedupWindow(60_000_000)
    plan = window.plan(ids("x", "x", "y", "x"), now_us=0)
    assert plan.keep is not None
    assert plan.keep.to_pylist() == [True, False, True, False]
    assert message_offsets(plan, 4, base=5) == [5, 5, 6, 5]


def test_ids_older_than_the_window_are_forgotten() -> None:
    window = DedupWindow(1_000)
    window.record(ids("old"), [1], time_us=0)
    window.record(ids("new"), [2], time_us=5_000)
    plan = window.plan(ids("old", "new"), now_us=5_500)
    assert plan.keep is not None
    assert plan.keep.to_pylist() == [True, False]
    assert len(window) == 1
