"""A cursor keeps its subscription's redelivery and dead-letter counts: they only grow
(a merge and a seek's replace keep the highest), and files written before the counts
existed read as 0."""

from __future__ import annotations

from pathlib import Path

from tamto_protocol.checked import dumps_checked
from tamto_storage.cursors import CursorStore, merge_cursors
from tamto_storage.model import Cursor, OffsetRange


def test_a_merge_keeps_the_highest_counts() -> None:
    merged = merge_cursors(Cursor(5, (), 7, 1), Cursor(3, (OffsetRange(8, 9),), 2, 4))
    assert merged == Cursor(5, (OffsetRange(8, 9),), 7, 4)


async def test_counts_survive_commits_a_replace_and_a_reopen(tmp_path: Path) -> None:
    store = CursorStore(tmp_path)
    await store.commit("billing", Cursor(10, (), redeliveries=3, dead_lettered=1))
    await store.commit("billing", Cursor(12))  # a commit from a router that counted less
    assert await store.get("billing") == Cursor(12, (), 3, 1)
    await store.commit("billing", Cursor(4, (), 5, 0), replace=True)  # a seek back
    assert await CursorStore(tmp_path).get("billing") == Cursor(4, (), 5, 1)
    assert await store.delete("billing")
    await store.commit("billing", Cursor(0))
    assert await store.get("billing") == Cursor(0), "a deleted cursor's counts go with it"


async def test_a_cursor_file_without_counts_reads_as_zero(tmp_path: Path) -> None:
    (tmp_path / "old.json").write_bytes(
        dumps_checked({"version": 1, "ack_floor": 9, "acked_above_floor": [[11, 12]]})
    )
    assert await CursorStore(tmp_path).get("old") == Cursor(9, (OffsetRange(11, 12),), 0, 0)
