"""Dedup: an id seen within the window is stored once, and survives a router crash."""

from __future__ import annotations

import uuid

import grpc
import pytest

import tamto_sdk
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_testing.cluster import TestCluster
from tests.e2e.gateway_calls import auth_metadata

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def drain(client: tamto_sdk.Client, stream: str, sub: str) -> list[bytes]:
    got: list[bytes] = []
    async with client.consumer(stream, sub) as consumer:
        while batch := await consumer.receive_batch(max_messages=100, timeout_s=1.5):
            got.extend(m.payload for m in batch)
            consumer.ack(batch)
    return got


async def test_a_repeated_id_is_stored_once_and_gets_the_original_offset(
    any_path_client: tamto_sdk.Client,
) -> None:
    stream = unique("dedup")
    await any_path_client.streams.ensure(stream, partitions=1)
    async with any_path_client.producer(stream) as producer:
        first = await producer.send_and_wait(b"order-1", id="order-1")
        await producer.send_and_wait(b"other")
        again = await producer.send_and_wait(b"order-1 (retry)", id="order-1")
    assert again.offset == first.offset
    assert await drain(any_path_client, stream, "d") == [b"order-1", b"other"]


async def test_a_retried_batch_is_not_stored_twice(tamto_cluster: TestCluster) -> None:
    stream = unique("retry")
    async with tamto_sdk.connect(tamto_cluster.url, api_key=tamto_cluster.credential) as c:
        await c.streams.ensure(stream, partitions=1)
        # What an idempotent producer resends after a lost connection: the same ids.
        data = encode_batch(
            BatchColumns(
                [b"a", b"b", b"c"], [None] * 3, [None] * 3, ["p:0", "p:1", "p:2"], [None] * 3
            )
        )
        async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            auth = await auth_metadata(stub, tamto_cluster.credential)
            request = gateway_pb2.PublishRequest(
                stream=stream, partition=0, batch=messages_pb2.RecordBatch(arrow_ipc=data, count=3)
            )
            first = await stub.Publish(request, metadata=auth)
            second = await stub.Publish(request, metadata=auth)
        assert list(first.offsets) == []
        assert list(second.offsets) == [first.base_offset + i for i in range(3)]
        assert await drain(c, stream, "r") == [b"a", b"b", b"c"]


async def test_the_dedup_window_survives_a_router_crash(fresh_cluster: TestCluster) -> None:
    async with tamto_sdk.connect(fresh_cluster.url, api_key=fresh_cluster.credential) as c:
        await c.streams.ensure("payments", partitions=1)
        async with c.producer("payments") as producer:
            first = await producer.send_and_wait(b"pay 10", id="payment-42")
        fresh_cluster.kill9("router")
        fresh_cluster.start("router")
        async with c.producer("payments") as producer:
            again = await producer.send_and_wait(b"pay 10", id="payment-42")
            await producer.send_and_wait(b"pay 11", id="payment-43")
        assert again.offset == first.offset
        assert await drain(c, "payments", "p") == [b"pay 10", b"pay 11"]


async def test_retried_sequences_get_their_offsets_back_after_a_router_crash(
    fresh_cluster: TestCluster,
) -> None:
    # An idempotent producer's batches carry `<producer>:<n>` ids with n growing: the
    # router remembers them as runs, and rebuilds those runs from the log on takeover.
    def batch(first: int, count: int) -> bytes:
        ids = [f"prod-1:{n}" for n in range(first, first + count)]
        payloads = [f"m{n}".encode() for n in range(first, first + count)]
        return encode_batch(
            BatchColumns(payloads, [None] * count, [None] * count, ids, [None] * count)
        )

    async with tamto_sdk.connect(fresh_cluster.url, api_key=fresh_cluster.credential) as c:
        await c.streams.ensure("runs", partitions=1)
        async with grpc.aio.insecure_channel(fresh_cluster.gateway_address) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            auth = await auth_metadata(stub, fresh_cluster.credential)

            async def publish(data: bytes, count: int) -> gateway_pb2.PublishResponse:
                request = gateway_pb2.PublishRequest(
                    stream="runs",
                    partition=0,
                    batch=messages_pb2.RecordBatch(arrow_ipc=data, count=count),
                )
                response: gateway_pb2.PublishResponse = await stub.Publish(
                    request, metadata=auth, wait_for_ready=True
                )
                return response

            first = await publish(batch(0, 100), 100)
            second = await publish(batch(100, 50), 50)
            fresh_cluster.kill9("router")
            fresh_cluster.start("router")
            again = await publish(batch(100, 50), 50)  # the retry of the second batch
            straddle = await publish(batch(140, 20), 20)  # half known, half new
        assert list(again.offsets) == [second.base_offset + i for i in range(50)]
        end = first.base_offset + 150
        assert list(straddle.offsets) == [second.base_offset + 40 + i for i in range(10)] + [
            end + i for i in range(10)
        ]
        got = await drain(c, "runs", "r")
        assert got == [f"m{n}".encode() for n in range(160)]
