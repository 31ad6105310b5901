"""A delivery the SDK cannot decode raises `UndecodableBatch` naming stream, partition
and offsets, and the consumer can skip (ack) or nack it and go on (issue 17)."""

from __future__ import annotations

import pytest
from sdk_fake_gateway import FakeGateway, StoredBatch

from tamto_sdk import Client, DataLoss, UndecodableBatch
from tamto_testing.crafted_batches import CRAFTED, ROWS, valid_batch, valid_columns


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
