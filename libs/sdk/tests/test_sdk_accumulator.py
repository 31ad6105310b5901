"""Unit tests of `tamto_sdk.accumulator`: batching, linger, backpressure and flush,
without a sender or a network (the tests play the sender's part)."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from tamto_protocol.partitioning import partition_for_key
from tamto_sdk.accumulator import Accumulator
from tamto_sdk.columns import batch_columns
from tamto_sdk.errors import Closed, Unavailable
from tamto_sdk.messages import PublishedBatch, PublishResult
from tamto_sdk.producer_batch import BatchOutcome

#: Long enough that a test never sees an open batch linger out by itself.
_FOREVER_MS = 600_000
#: How long a test gives a due batch to come out of `ready` (a loaded machine is slow).
_DEADLINE_S = 30.0


def _accumulator(
    partitions: int = 1,
    *,
    linger_ms: float = 0,
    max_batch_messages: int = 1000,
    max_batch_bytes: int = 4 << 20,
    max_pending_messages: int = 100_000,
) -> tuple[Accumulator, list[int]]:
    started: list[int] = []
    accumulator = Accumulator(
        "s",
        linger_s=linger_ms / 1000,
        max_batch_messages=max_batch_messages,
        max_batch_bytes=max_batch_bytes,
        max_pending_messages=max_pending_messages,
        on_partition=started.append,
    )
    accumulator.start(partitions, asyncio.get_running_loop())
    return accumulator, started


def _add(
    accumulator: Accumulator, payload: bytes, key: bytes | None = None
) -> asyncio.Future[PublishResult]:
    return accumulator.add(payload, key, None, None, None, key is None)


async def _still_lingering(accumulator: Accumulator, partition: int) -> bool:
    """Whether `ready` holds `partition`'s batch back (checked for a short while)."""
    try:
        await asyncio.wait_for(accumulator.ready(partition), 0.05)
    except TimeoutError:
        return True
    return False


async def test_keyed_messages_go_to_their_keys_partition_and_start_one_sender_each() -> None:
    accumulator, started = _accumulator(4)
    keys = [f"k{i}".encode() for i in range(20)]
    for key in keys:
        _add(accumulator, b"p", key)
    expected = {partition_for_key(key, 4) for key in keys}
    assert sorted(started) == sorted(expected)
    for partition in expected:
        batch = await asyncio.wait_for(accumulator.ready(partition), _DEADLINE_S)
        wanted = [k for k in keys if partition_for_key(k, 4) == partition]
        assert batch.columns()[0].to_pylist() == wanted
    assert accumulator.pending == len(keys)


async def test_a_full_batch_is_due_at_once_and_the_next_message_opens_another() -> None:
    accumulator, _ = _accumulator(1, linger_ms=_FOREVER_MS, max_batch_messages=3)
    for i in range(4):
        _add(accumulator, bytes([i]))
    full = await asyncio.wait_for(accumulator.ready(0), _DEADLINE_S)
    assert full.columns()[1].to_pylist() == [b"\x00", b"\x01", b"\x02"]
    assert await _still_lingering(accumulator, 0)  # the fourth message's batch lingers


async def test_max_batch_bytes_closes_a_batch_before_it_overflows() -> None:
    accumulator, _ = _accumulator(1, linger_ms=_FOREVER_MS, max_batch_bytes=250)
    for _ in range(3):
        _add(accumulator, b"x" * 100)
    first = await asyncio.wait_for(accumulator.ready(0), _DEADLINE_S)
    assert first.count == 1  # 2 x (100 + overhead) exceeds 250 bytes
    second = await asyncio.wait_for(accumulator.ready(0), _DEADLINE_S)
    assert second.count == 1


async def test_an_open_batch_lingers_until_flush() -> None:
    accumulator, _ = _accumulator(1, linger_ms=_FOREVER_MS)
    future = _add(accumulator, b"p")
    assert await _still_lingering(accumulator, 0)
    flushing = asyncio.ensure_future(accumulator.flush())
    batch = await asyncio.wait_for(accumulator.ready(0), _DEADLINE_S)
    assert not flushing.done()  # flush waits for the outcome, not just for the take
    batch.resolve("s", 0, [41])
    accumulator.finish(batch, None)
    await asyncio.wait_for(flushing, _DEADLINE_S)
    assert future.result() == PublishResult("s", 0, 41)
    assert accumulator.pending == 0


async def test_without_linger_keyless_messages_stay_on_one_partition_until_a_full_batch() -> None:
    accumulator, started = _accumulator(4, max_batch_messages=10)
    for _ in range(3):
        _add(accumulator, b"p")
    (partition,) = started  # the sticky partition
    taken = await asyncio.wait_for(accumulator.ready(partition), _DEADLINE_S)
    assert taken.count == 3
    for _ in range(7):  # 3 went there, fewer than 10: still the same partition
        _add(accumulator, b"p")
    assert started == [partition]
    taken = await asyncio.wait_for(accumulator.ready(partition), _DEADLINE_S)
    assert taken.count == 7
    _add(accumulator, b"p")  # a full batch's worth went there: on to the next one
    assert started == [partition, (partition + 1) % 4]


async def test_backpressure_waits_for_an_outcome_and_close_ends_the_wait() -> None:
    accumulator, _ = _accumulator(1, max_pending_messages=2)
    _add(accumulator, b"a")
    _add(accumulator, b"b")
    waiting = asyncio.ensure_future(accumulator.wait_for_space())
    await asyncio.sleep(0)
    assert not waiting.done()
    batch = await asyncio.wait_for(accumulator.ready(0), _DEADLINE_S)
    batch.resolve("s", 0, [0, 1])
    accumulator.finish(batch, None)
    await asyncio.wait_for(waiting, _DEADLINE_S)
    _add(accumulator, b"c")
    _add(accumulator, b"d")
    blocked = asyncio.ensure_future(accumulator.wait_for_space())
    await asyncio.sleep(0)
    accumulator.close()
    with pytest.raises(Closed):
        await asyncio.wait_for(blocked, _DEADLINE_S)


async def test_rows_split_at_the_message_cap_and_fill_one_outcome_in_call_order() -> None:
    accumulator, _ = _accumulator(1, max_batch_messages=4)
    loop = asyncio.get_running_loop()
    single = _add(accumulator, b"before")
    future: asyncio.Future[PublishedBatch] = loop.create_future()
    payloads = [f"r{i}".encode() for i in range(6)]
    columns = batch_columns(payloads, None, None, None, None)
    accumulator.add_rows(columns, BatchOutcome("s", 6, future))
    assert accumulator.pending == 7
    offset = 100
    batches: list[list[bytes]] = []
    while accumulator.pending and len(batches) < 3:
        batch = await asyncio.wait_for(accumulator.ready(0), _DEADLINE_S)
        batches.append(batch.columns()[1].to_pylist())
        batch.resolve("s", 0, range(offset, offset + batch.count))
        offset += batch.count
        accumulator.finish(batch, None)
    assert batches == [[b"before", *payloads[:3]], payloads[3:]]
    assert single.result() == PublishResult("s", 0, 100)
    published = future.result()
    assert published.offsets.to_pylist() == list(range(101, 107))
    assert published.partitions.to_pylist() == [0] * 6


async def test_an_empty_outcome_is_complete_at_once() -> None:
    future: asyncio.Future[PublishedBatch] = asyncio.get_running_loop().create_future()
    BatchOutcome("s", 0, future)
    assert len(future.result().offsets) == 0


async def test_abort_fails_the_taken_and_the_queued_batches() -> None:
    accumulator, _ = _accumulator(1, max_batch_messages=1)
    first = _add(accumulator, b"a")
    second = _add(accumulator, b"b")
    rows: asyncio.Future[PublishedBatch] = asyncio.get_running_loop().create_future()
    accumulator.add_rows(
        batch_columns(pa.array([b"c"]), None, None, None, None), BatchOutcome("s", 1, rows)
    )
    taken = await asyncio.wait_for(accumulator.ready(0), _DEADLINE_S)
    error = Unavailable("gone")
    accumulator.abort(0, taken, error)
    for future in (first, second, rows):
        assert future.exception() is error
    assert accumulator.pending == 0
    await asyncio.wait_for(accumulator.flush(), _DEADLINE_S)  # nothing left to wait for
