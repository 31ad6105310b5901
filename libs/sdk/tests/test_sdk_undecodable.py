"""A delivery the SDK cannot decode raises `UndecodableBatch` naming stream, partition
and offsets, and the consumer can skip (ack) or nack it and go on; so does
one with a value no Python type holds (an event time past year 9999)."""

from __future__ import annotations

import pytest
from sdk_fake_gateway import FakeGateway, StoredBatch

from tamto_protocol.v1 import messages_pb2
from tamto_sdk import Client
from tamto_sdk.errors import DataLoss, UndecodableBatch
from tamto_sdk.messages import us_to_datetime
from tamto_sdk.subscriptions import _stored_batch
from tamto_testing.crafted_batches import CRAFTED, ROWS, valid_batch, valid_columns
from tamto_testing.oversized_batches import one_message


def store_lying_then_valid(gateway: FakeGateway) -> None:
    """Offsets 0..ROWS-1 lie (`[.., 4000]` past the data); ROWS..2*ROWS-1 are valid.

    Stored straight into the fake's log, as if something behind the gateway's
    validation had let it through."""
    gateway.add_stream("s", 1)
    lying = CRAFTED["payload offset past the data"].arrow_ipc
    gateway.logs[("s", 0)] = [
        StoredBatch(0, ROWS, 1_700_000_000_000_000, lying),
        StoredBatch(ROWS, ROWS, 1_700_000_000_000_001, valid_batch()),
    ]


async def test_an_undecodable_delivery_is_raised_and_acking_it_skips_it(
    client: Client, gateway: FakeGateway
) -> None:
    store_lying_then_valid(gateway)
    async with client.consumer("s", "sub") as consumer:
        with pytest.raises(UndecodableBatch) as raised:
            await consumer.receive_batch(timeout_s=5)
        error = raised.value
        assert isinstance(error, DataLoss)
        assert not error.retriable
        assert (error.stream, error.partition) == ("s", 0)
        assert error.offset_ranges() == [(0, ROWS - 1)]
        assert f"stream 's' partition 0 offsets 0-{ROWS - 1}" in error.message
        assert "column 'payload'" in error.message
        consumer.ack(error)
        # The consumer goes on: the next batch is the valid one, exactly as sent.
        batch = await consumer.receive_batch(timeout_s=5)
        assert batch.first_offset == ROWS
        assert [m.payload for m in batch] == list(valid_columns().payloads)
        consumer.ack(batch)
        await gateway.wait_for(lambda: len(gateway.acked("s", "sub", 0)) == 2 * ROWS)


async def test_an_undecodable_delivery_can_be_nacked(client: Client, gateway: FakeGateway) -> None:
    store_lying_then_valid(gateway)
    async with client.consumer("s", "sub") as consumer:
        with pytest.raises(UndecodableBatch) as raised:
            await consumer.receive_batch(timeout_s=5)
        consumer.nack(raised.value)
        sub = gateway.subscriptions[("s", "sub")]
        await gateway.wait_for(lambda: bool(sub.nack_requests))
        assert sub.nack_requests[0][:2] == (0, [(0, ROWS - 1)])


async def test_iterating_raises_it_too_and_goes_on(client: Client, gateway: FakeGateway) -> None:
    store_lying_then_valid(gateway)
    async with client.consumer("s", "sub") as consumer:
        with pytest.raises(UndecodableBatch):
            await anext(aiter(consumer))
        message = await anext(aiter(consumer))
        assert message.offset == ROWS


async def test_an_event_time_no_datetime_holds_is_an_undecodable_batch(
    client: Client, gateway: FakeGateway
) -> None:
    # Stored before the edge refused such values: reading the field raised OverflowError.
    gateway.add_stream("s", 1)
    far = one_message(payload=b"far", event_time_us=2**63 - 1)
    gateway.logs[("s", 0)] = [
        StoredBatch(0, 1, 1_700_000_000_000_000, far),
        StoredBatch(1, ROWS, 1_700_000_000_000_001, valid_batch()),
    ]
    async with client.consumer("s", "sub") as consumer:
        with pytest.raises(UndecodableBatch, match="column 'event_time'") as raised:
            await consumer.receive_batch(timeout_s=5)
        assert raised.value.offset_ranges() == [(0, 0)]
        consumer.ack(raised.value)
        batch = await consumer.receive_batch(timeout_s=5)
        assert [m.event_time for m in batch] == [
            us_to_datetime(t) for t in valid_columns().event_times_us if t is not None
        ]


def test_reading_stored_messages_raises_the_same_typed_error() -> None:
    far = one_message(event_time_us=-(2**63))
    stored = messages_pb2.StoredBatch(base_offset=7, count=1, publish_time_us=1, arrow_ipc=far)
    with pytest.raises(UndecodableBatch, match="offsets 7: column 'event_time'"):
        _stored_batch("s", 0, stored)


async def test_a_publish_time_no_datetime_holds_is_an_undecodable_batch(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    gateway.logs[("s", 0)] = [StoredBatch(0, ROWS, 2**63 - 1, valid_batch())]
    async with client.consumer("s", "sub") as consumer:
        with pytest.raises(UndecodableBatch, match="publish_time_us 9223372036854775807"):
            await consumer.receive_batch(timeout_s=5)
