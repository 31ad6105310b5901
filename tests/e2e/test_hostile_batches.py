"""Publishes whose Arrow buffers lie are refused at the gateway, naming the column,
and no consumer ever receives a byte no producer sent (Found 1)."""

from __future__ import annotations

import uuid

import grpc
import pytest

import tamto_sdk
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc
from tamto_testing.cluster import TestCluster
from tamto_testing.crafted_batches import CRAFTED, ROWS, valid_batch, valid_columns
from tests.e2e.gateway_calls import auth_metadata, raw_publish

pytestmark = pytest.mark.e2e


async def test_every_lying_batch_is_refused_and_consumers_get_only_what_was_sent(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = f"hostile-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        metadata = await auth_metadata(stub, tamto_cluster.credential)

        async def publish(data: bytes, count: int) -> gateway_pb2.PublishResponse:
            return await raw_publish(stub, metadata, stream, data, count)

        for name, crafted in sorted(CRAFTED.items()):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await publish(crafted.arrow_ipc, crafted.count)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            assert f"column {crafted.column!r}" in (refused.value.details() or ""), name
        # The same connection keeps serving: the valid batch they were made from is stored.
        stored = await publish(valid_batch(), ROWS)
        assert (stored.base_offset, stored.count) == (0, ROWS)

    sent = list(valid_columns().payloads)
    got: list[bytes] = []
    async with tamto_client.consumer(stream, "reader") as consumer:
        while len(got) < len(sent):
            batch = await consumer.receive_batch(max_messages=ROWS, timeout_s=10)
            assert len(batch) > 0, f"only {len(got)} of {len(sent)} messages arrived"
            got.extend(bytes(m.payload) for m in batch)
            consumer.ack(batch)
        assert len(await consumer.receive_batch(max_messages=1, timeout_s=0.5)) == 0
    assert got == sent
