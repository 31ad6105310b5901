"""Several batches of one producer in flight at once: the partition's log stores them
in the order the producer sent them (`tamto_router.producer_turns`), holds one that
arrived early, refuses it retriably when the one ahead never comes, and never
stores a retry twice."""

from __future__ import annotations

import asyncio

import pytest
from test_partition_log_append import FakeStorage, arrow

from tamto_common.errors import Unavailable
from tamto_protocol.batch import decode_batch
from tamto_router import producer_turns
from tamto_router.dedup import DedupWindow
from tamto_router.model import LogBounds, ProducerOrder
from tamto_router.partition_log import PartitionLog
from tamto_testing.waiting import eventually


def _order(last: int, after: int | None) -> ProducerOrder:
    return ProducerOrder("p-1", last, after)


def _log(storage: FakeStorage) -> PartitionLog:
    window = DedupWindow(60_000_000)
    return PartitionLog("s", 0, 1, storage, LogBounds(0, 0), window)  # type: ignore[arg-type]


def _stored_ids(storage: FakeStorage) -> list[int]:
    ids = [
        i
        for call in storage.calls
        for batch in call
        for i in decode_batch(batch.arrow_ipc).column("id").to_pylist()
    ]
    return [int(i.rsplit(":", 1)[1]) for i in ids]


async def test_a_batch_that_arrives_before_the_one_ahead_is_stored_after_it() -> None:
    storage = FakeStorage()
    storage.gate.set()
    log = _log(storage)
    first = await log.append(arrow(0, 5), 5, _order(4, None))
    # The third batch (10-14) arrives before the second (5-9), which is unanswered.
    third = asyncio.create_task(log.append(arrow(10, 5), 5, _order(14, 9)))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not third.done(), "held until the batch it names is sequenced"
    assert _stored_ids(storage) == list(range(5))
    second = await log.append(arrow(5, 5), 5, _order(9, 4))
    third_at = await asyncio.wait_for(third, 5)
    assert (first.base_offset, second.base_offset, third_at.base_offset) == (0, 5, 10)
    assert _stored_ids(storage) == list(range(15))
    await log.close()


async def test_a_batch_whose_predecessor_never_comes_is_refused_retriably(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(producer_turns, "HOLD_S", 0.2)
    storage = FakeStorage()
    storage.gate.set()
    log = _log(storage)
    with pytest.raises(Unavailable, match="arrived before that one") as refused:
        await asyncio.wait_for(log.append(arrow(5, 5), 5, _order(9, 4)), 5)
    assert refused.value.retriable
    assert storage.calls == []
    # Once the producer holds the answer to the batch ahead it names none: stored.
    resent = await log.append(arrow(5, 5), 5, _order(9, None))
    assert resent.base_offset == 0
    await log.close()


async def test_retries_of_batches_in_flight_are_never_stored_twice() -> None:
    storage = FakeStorage()
    storage.gate.set()
    log = _log(storage)
    await log.append(arrow(0, 5), 5, _order(4, None))
    await log.append(arrow(5, 5), 5, _order(9, 4))
    # The answers were lost: the producer sends both again, the later one first.
    later = asyncio.create_task(log.append(arrow(5, 5), 5, _order(9, 4)))
    again = await log.append(arrow(0, 5), 5, _order(4, None))
    assert again.offsets == [0, 1, 2, 3, 4]
    assert (await asyncio.wait_for(later, 5)).offsets == [5, 6, 7, 8, 9]
    assert _stored_ids(storage) == list(range(10))
    await log.close()


async def test_a_held_batch_fails_with_the_log() -> None:
    storage = FakeStorage()
    storage.gate.set()
    log = _log(storage)
    held = asyncio.create_task(log.append(arrow(5, 5), 5, _order(9, 4)))
    await eventually(lambda: not held.done(), 5, "the batch is held")
    await log.close()  # a partition handed back fails what waits on it, retriably
    with pytest.raises(Unavailable, match="closed on this router"):
        await asyncio.wait_for(held, 5)
    assert storage.calls == []
