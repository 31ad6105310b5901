from __future__ import annotations

import asyncio

import pytest

from tamto_common.errors import Unavailable
from tamto_router.acks import AckSet
from tamto_router.cursor_commits import CursorCommits


class Store:
    """Records committed cursors; each commit takes `delay_s`; can be made to fail."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.commits: list[tuple[int, list[tuple[int, int]]]] = []
        self.failing = False

    async def commit(self, acks: AckSet) -> None:
        await asyncio.sleep(self.delay_s)
        if self.failing:
            raise Unavailable("storage is restarting")
        self.commits.append((acks.floor, list(acks.ranges)))


async def test_many_acks_share_a_few_commits_and_the_last_state_is_committed() -> None:
    store, acks = Store(delay_s=0.01), AckSet(0)
    cursor = CursorCommits(acks, store.commit, interval_s=0.05, name="s/0/sub")
    for offset in range(100):
        acks.ack_range(offset, offset)
        cursor.changed()
        await asyncio.sleep(0.001)
    await cursor.flush()
    assert store.commits[-1] == (100, [])
    assert len(store.commits) < 20, "commits are coalesced, not one per ack"
    await cursor.close()


async def test_the_first_commit_after_a_quiet_spell_goes_at_once() -> None:
    store, acks = Store(), AckSet(0)
    cursor = CursorCommits(acks, store.commit, interval_s=10.0, name="s/0/sub")
    acks.ack_range(0, 4)
    cursor.changed()
    await asyncio.sleep(0.05)
    assert store.commits == [(5, [])]
    assert not cursor.pending
    await cursor.close()


async def test_flush_cuts_the_interval_short() -> None:
    store, acks = Store(), AckSet(0)
    cursor = CursorCommits(acks, store.commit, interval_s=10.0, name="s/0/sub")
    acks.ack_range(0, 0)
    cursor.changed()
    await asyncio.sleep(0.01)
    acks.ack_range(1, 1)
    cursor.changed()  # waits out the interval...
    await asyncio.wait_for(cursor.flush(), 1.0)  # ...unless someone needs it now
    assert store.commits[-1] == (2, [])
    await cursor.close()


async def test_a_failed_commit_is_retried_and_flush_reports_it() -> None:
    store, acks = Store(), AckSet(0)
    store.failing = True
    cursor = CursorCommits(acks, store.commit, interval_s=0.01, name="s/0/sub")
    acks.ack_range(0, 2)
    cursor.changed()
    with pytest.raises(Unavailable):
        await asyncio.wait_for(cursor.flush(), 2.0)
    store.failing = False
    await asyncio.wait_for(cursor.flush(), 2.0)
    assert store.commits == [(3, [])]
    await cursor.close()


async def test_close_commits_what_is_pending() -> None:
    store, acks = Store(), AckSet(0)
    cursor = CursorCommits(acks, store.commit, interval_s=10.0, name="s/0/sub")
    acks.ack_range(0, 0)
    cursor.changed()
    await asyncio.sleep(0.01)
    acks.ack_range(1, 5)
    cursor.changed()
    await cursor.close()
    assert store.commits[-1] == (6, [])
    assert not cursor.pending
