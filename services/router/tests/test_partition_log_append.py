"""The append pipeline of one partition: sequencing, dedup of idempotent batches,
storage RPCs bounded in size."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from tamto_common.errors import Unavailable
from tamto_protocol.batch import encode_record_batch, make_batch, sequence_ids
from tamto_router import partition_log
from tamto_router.dedup import DedupWindow
from tamto_router.model import Batch, LogBounds
from tamto_router.partition_log import PartitionLog
from tamto_testing.waiting import eventually


class FakeStorage:
    """Records each append RPC; the first one waits for `gate` so others queue up."""

    def __init__(self) -> None:
        self.calls: list[list[Batch]] = []
        self.gate = asyncio.Event()

    async def append(self, stream: str, partition: int, epoch: int, batches: list[Batch]) -> int:
        self.calls.append(batches)
        await self.gate.wait()
        return batches[-1].end


def arrow(first: int, count: int, size: int = 10) -> bytes:
    payloads = pa.array([bytes(size)] * count, pa.binary())
    return encode_record_batch(make_batch(payloads, ids=sequence_ids("p-1", first, count)))


async def test_queued_batches_go_to_storage_in_rpcs_of_bounded_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = FakeStorage()
    log = PartitionLog("s", 0, 1, storage, LogBounds(0, 0))  # type: ignore[arg-type]
    one = len(arrow(100, 10, size=100))  # every batch below has this size (3-digit ids)
    monkeypatch.setattr(partition_log, "MAX_APPEND_BYTES", 2 * one)
    appends = [
        asyncio.create_task(log.append(arrow(100 + 10 * i, 10, size=100), 10)) for i in range(7)
    ]
    await asyncio.sleep(0.01)
    storage.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*appends), 5)
    assert [r.base_offset for r in results] == [10 * i for i in range(7)]
    # At most two batches per RPC, everything in order.
    assert [len(call) for call in storage.calls] == [2, 2, 2, 1]
    assert [b.base_offset for call in storage.calls for b in call] == [10 * i for i in range(7)]
    await log.close()


async def test_a_retried_idempotent_batch_gets_its_offsets_back() -> None:
    storage = FakeStorage()
    storage.gate.set()
    window = DedupWindow(60_000_000)
    log = PartitionLog("s", 0, 1, storage, LogBounds(0, 100), window)  # type: ignore[arg-type]
    first = await log.append(arrow(0, 5), 5)
    second = await log.append(arrow(5, 5), 5)
    assert (first.base_offset, first.offsets, second.base_offset) == (100, None, 105)
    assert len(window) == 10
    assert not window._seen, "remembered as runs, not id by id"
    again = await log.append(arrow(5, 5), 5)
    assert again.offsets == [105, 106, 107, 108, 109]
    straddle = await log.append(arrow(8, 4), 4)
    assert straddle.offsets == [108, 109, 110, 111]
    assert sum(len(call) for call in storage.calls) == 3  # the retry stored nothing
    await log.close()


async def test_closing_answers_the_append_being_stored_before_it_stops() -> None:
    """A partition handed back mid-append answers that publish (a move left it waiting
    for the caller's 30 s deadline: the sender was cancelled with it in hand)."""
    storage = FakeStorage()
    log = PartitionLog("s", 0, 1, storage, LogBounds(0, 0))  # type: ignore[arg-type]
    append = asyncio.create_task(log.append(arrow(0, 5), 5))
    await eventually(lambda: len(storage.calls) == 1, 5, "the append reaches storage")
    closing = asyncio.create_task(log.close())
    await asyncio.sleep(0)  # close runs up to its wait: the append is still being stored
    assert not closing.done()
    storage.gate.set()
    await asyncio.wait_for(closing, 5)
    assert (await asyncio.wait_for(append, 5)).base_offset == 0


async def test_a_failed_log_stopped_mid_append_fails_that_append_at_once() -> None:
    storage = FakeStorage()
    log = PartitionLog("s", 0, 1, storage, LogBounds(0, 0))  # type: ignore[arg-type]
    append = asyncio.create_task(log.append(arrow(0, 5), 5))
    await eventually(lambda: len(storage.calls) == 1, 5, "the append reaches storage")
    log.failure = Unavailable("ownership lease lost")  # as `Partitions.forget_claims` does
    await asyncio.wait_for(log.close(), 5)
    with pytest.raises(Unavailable, match="ownership lease lost"):
        await asyncio.wait_for(append, 5)
