"""Unit tests of the per-message consuming path: `Message` as a lazy view of
one row of its batch, `MessageBatch` iteration, and `Consumer.ack` recording a run of
consecutive offsets in place. No server: batches go straight into a consumer's buffer."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import cast

import pyarrow as pa
import pytest
from sdk_iteration_bench import make_batch

from tamto_protocol.batch import BATCH_SCHEMA
from tamto_protocol.limits import MAX_RANGES_PER_REQUEST
from tamto_sdk import ClientOptions, Message, MessageBatch
from tamto_sdk._calls import Calls
from tamto_sdk.columns import message_columns
from tamto_sdk.consumer import Consumer
from tamto_sdk.errors import Closed, InvalidArgument
from tamto_sdk.messages import us_to_datetime
from tamto_sdk.pending_acks import OffsetRuns

PUBLISHED = us_to_datetime(1_700_000_000_000_000)
EVENT_US = 1_600_000_000_000_000


def full_batch(sparse: tuple[int, ...] | None = None) -> MessageBatch:
    """Three messages, the second with every optional field set."""
    key, payload, headers, ids, event_time = message_columns(
        [b"p0", b"p1", b"p2"],
        keys=[None, b"k1", None],
        headers=[None, {"trace": "t1", "a": "b"}, None],
        ids=[None, "id-1", None],
        event_times=[None, EVENT_US, None],
    )
    producer = pa.nulls(3, BATCH_SCHEMA.field("producer").type)
    record_batch = pa.RecordBatch.from_arrays(
        [key, payload, headers, ids, event_time, producer], schema=BATCH_SCHEMA
    )
    return MessageBatch(
        stream="s",
        partition=2,
        first_offset=10,
        publish_time=PUBLISHED,
        record_batch=record_batch,
        delivery_count=3,
        sparse_offsets=sparse,
    )


def test_iterated_messages_read_each_field_from_their_row() -> None:
    first, second, third = full_batch()
    assert (first.offset, second.offset, third.offset) == (10, 11, 12)
    assert [m.payload for m in (first, second, third)] == [b"p0", b"p1", b"p2"]
    assert second == Message(
        stream="s",
        partition=2,
        offset=11,
        payload=b"p1",
        key=b"k1",
        headers={"trace": "t1", "a": "b"},
        id="id-1",
        event_time=us_to_datetime(EVENT_US),
        publish_time=PUBLISHED,
        delivery_count=3,
    )
    assert (first.key, first.headers, first.id, first.event_time) == (None, {}, None, None)
    assert second.event_time == datetime.fromtimestamp(EVENT_US / 1e6, UTC)


def test_sparse_batches_give_each_message_its_own_offset() -> None:
    assert [m.offset for m in full_batch(sparse=(4, 9, 30))] == [4, 9, 30]


def test_a_column_is_converted_once_per_batch_and_only_when_read() -> None:
    batch = full_batch()
    messages = list(batch)
    rows = messages[0]._rows
    assert all(m._rows is rows for m in messages)
    assert "payloads" not in vars(rows)  # iterating converted nothing
    assert [m.payload for m in messages] == [b"p0", b"p1", b"p2"]
    payloads = vars(rows)["payloads"]
    assert messages[2].payload is payloads[2]  # the batch's list, not a new conversion
    assert "keys" not in vars(rows)
    assert "ids" not in vars(rows)
    assert messages[1].headers is messages[1].headers  # decoded once, then the same dict


def test_message_keeps_its_dataclass_behaviour() -> None:
    message = Message(stream="s", partition=0, offset=5, payload=b"x")
    assert message.headers == {}
    assert message.delivery_count == 1
    moved = dataclasses.replace(message, stream="other", offset=6)
    assert (moved.stream, moved.offset, moved.payload) == ("other", 6, b"x")
    assert dataclasses.asdict(message)["payload"] == b"x"
    assert [f.name for f in dataclasses.fields(Message)][:4] == [
        "stream",
        "partition",
        "offset",
        "payload",
    ]
    assert repr(message).startswith("Message(stream='s', partition=0, offset=5, payload=b'x'")
    assert message != moved
    assert message == dataclasses.replace(moved, stream="s", offset=5)
    with pytest.raises(AttributeError):
        message.payload = b"y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(message)
    match message:
        case Message("s", 0, offset):
            assert offset == 5
        case _:
            pytest.fail("positional pattern did not match")


def test_offset_runs_extend_in_place_and_merge_when_taken() -> None:
    runs = OffsetRuns(5, 5)
    for offset in range(6, 100):
        runs.add(offset, offset)
    assert (runs.closed, runs.first, runs.last) == ([], 5, 99)
    runs.add(200, 210)
    runs.add(1, 4)  # touches 5..99
    runs.add(150, 150)
    runs.add(205, 220)  # overlaps 200..210
    assert runs.merged() == [(1, 99), (150, 150), (200, 220)]


def consumer(credits: int = 1000) -> Consumer:
    """A consumer that is never started: batches are put into its buffer by hand."""
    calls = cast(Calls, SimpleNamespace(options=ClientOptions()))
    return Consumer(calls, "bench", "sub", credits=credits)


def taken_ranges(c: Consumer) -> dict[int, list[tuple[int, int]]]:
    return {
        r.ack.partition: [(x.first, x.last) for x in r.ack.ranges] for r in c._pending.take_acks()
    }


async def test_acking_message_by_message_sends_runs_of_offsets() -> None:
    c = consumer()
    c._buffer.extend([make_batch(0, 50), make_batch(50, 50)])
    c._data.set()
    seen: list[Message] = []
    async for message in c:
        seen.append(message)
        if message.offset % 10 != 7:  # 7, 17, ... stay unacked
            c.ack(message)
        if len(seen) == 100:
            break
    assert [m.offset for m in seen] == list(range(100))
    gaps = [(10 * i + 8, 10 * i + 16) for i in range(9)]
    assert taken_ranges(c) == {0: [(0, 6), *gaps, (98, 99)]}
    c.ack(seen[7])
    c.ack(seen[3])  # again: already sent, acked twice is harmless
    assert taken_ranges(c) == {0: [(3, 3), (7, 7)]}
    assert taken_ranges(c) == {}


def test_acks_over_the_servers_limit_go_in_several_requests() -> None:
    c = consumer()
    n = MAX_RANGES_PER_REQUEST + 5
    for i in range(n):
        c._add_ack(0, 2 * i, 2 * i)  # n disjoint ranges on one partition
    requests = c._pending.take_acks()
    assert [len(r.ack.ranges) for r in requests] == [MAX_RANGES_PER_REQUEST, 5]
    sent = [(x.first, x.last) for r in requests for x in r.ack.ranges]
    assert sent == [(2 * i, 2 * i) for i in range(n)]


async def test_ack_checks_the_stream_and_a_closed_consumer() -> None:
    c = consumer()
    c._buffer.append(make_batch(0, 1))
    c._data.set()
    message = await c.__anext__()
    with pytest.raises(InvalidArgument, match="'other' is not the stream"):
        c.ack(dataclasses.replace(message, stream="other"))
    c._closing = True
    with pytest.raises(Closed):
        c.ack(message)


async def test_iteration_asks_for_credit_once_half_the_window_is_taken() -> None:
    c = consumer(credits=10)
    c._buffer.append(make_batch(0, 8))
    c._data.set()
    for _ in range(4):
        await c.__anext__()
    assert not c._flush_now.is_set()
    await c.__anext__()
    assert c._flush_now.is_set()
    assert c._taken_since_grant == 5


async def test_receive_batch_after_async_for_continues_where_it_stopped() -> None:
    c = consumer()
    c._buffer.append(make_batch(0, 10))
    c._data.set()
    assert (await c.__anext__()).offset == 0
    rest = await c.receive_batch(4)
    assert rest.offset_list() == [1, 2, 3, 4]
    assert (await c.__anext__()).offset == 5
