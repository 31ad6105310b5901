"""Messages published through the gateway reach a subscription, durably."""

from __future__ import annotations

import uuid

import grpc
import pyarrow as pa
import pytest

import tamto_sdk
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_testing.cluster import TestCluster
from tests.e2e.gateway_calls import auth_metadata

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def consume_n(
    client: tamto_sdk.Client, stream: str, sub: str, n: int
) -> list[tamto_sdk.Message]:
    got: list[tamto_sdk.Message] = []
    async with client.consumer(stream, sub) as consumer:
        while len(got) < n:
            batch = await consumer.receive_batch(max_messages=n - len(got), timeout_s=10)
            assert len(batch) > 0, f"only {len(got)} of {n} messages arrived"
            got.extend(batch)
            consumer.ack(batch)
    return got


async def test_published_messages_reach_a_subscription_in_partition_order(
    any_path_client: tamto_sdk.Client,
) -> None:
    stream = unique("orders")
    await any_path_client.streams.ensure(stream, partitions=3)
    async with any_path_client.producer(stream) as producer:
        futures = [
            await producer.send(f"m{i}".encode(), key=f"k{i % 7}".encode(), headers={"i": str(i)})
            for i in range(300)
        ]
        results = [await f for f in futures]
    assert {r.partition for r in results} == {0, 1, 2}

    got = await consume_n(any_path_client, stream, "reader", 300)
    assert sorted(m.payload for m in got) == sorted(f"m{i}".encode() for i in range(300))
    by_position = {(r.partition, r.offset): f"m{i}".encode() for i, r in enumerate(results)}
    assert {(m.partition, m.offset): m.payload for m in got} == by_position
    for partition in (0, 1, 2):
        offsets = [m.offset for m in got if m.partition == partition]
        assert offsets == sorted(offsets), "order must hold within a partition"
    assert all(m.headers["i"] == m.payload.decode()[1:] for m in got)


async def test_acked_messages_are_not_delivered_again(any_path_client: tamto_sdk.Client) -> None:
    stream = unique("acks")
    await any_path_client.streams.ensure(stream, partitions=1)
    async with any_path_client.producer(stream) as producer:
        for i in range(20):
            await producer.send(f"first-{i}".encode())
    await consume_n(any_path_client, stream, "s", 20)
    async with any_path_client.producer(stream) as producer:
        for i in range(5):
            await producer.send(f"second-{i}".encode())
    again = await consume_n(any_path_client, stream, "s", 5)
    assert [m.payload for m in again] == [f"second-{i}".encode() for i in range(5)]


async def test_an_exclusive_subscription_refuses_a_second_consumer(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("excl")
    await tamto_client.streams.ensure(stream, partitions=1)
    await _send_one(tamto_client, stream)
    async with tamto_client.consumer(stream, "only") as first:
        batch = await first.receive_batch(max_messages=1, timeout_s=10)
        assert len(batch) == 1
        with pytest.raises(tamto_sdk.errors.FailedPrecondition, match="already has a consumer"):
            async with tamto_client.consumer(stream, "only") as second:
                await second.receive_batch(max_messages=1, timeout_s=10)


async def _send_one(client: tamto_sdk.Client, stream: str) -> None:
    async with client.producer(stream) as producer:
        await producer.send_and_wait(b"x")


async def test_bad_names_and_unknown_streams_get_precise_errors(
    tamto_client: tamto_sdk.Client,
) -> None:
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match="illegal stream name"):
        await tamto_client.streams.ensure("../etc", partitions=1)
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match="must not be empty"):
        await tamto_client.streams.ensure("", partitions=1)
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match="partitions must be between"):
        await tamto_client.streams.ensure(unique("p"), partitions=5000)
    with pytest.raises(tamto_sdk.errors.NotFound, match="does not exist"):
        await tamto_client.streams.describe(unique("missing"))


async def test_gateway_refuses_calls_without_a_valid_token(tamto_cluster: TestCluster) -> None:
    async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.ListStreams(gateway_pb2.ListStreamsRequest())
        assert missing.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as forged:
            await stub.ListStreams(
                gateway_pb2.ListStreamsRequest(), metadata=[("authorization", "Bearer a.b.c")]
            )
        assert forged.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(tamto_sdk.errors.Unauthenticated):
        await tamto_sdk.connect(tamto_cluster.url, api_key="tamto_000000000000_wrongwrongwrong")


async def test_malformed_and_oversized_batches_are_refused(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = unique("bad")
    await tamto_client.streams.ensure(stream, partitions=2)
    async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        auth = await auth_metadata(stub, tamto_cluster.credential)

        async def publish(data: bytes, count: int, partition: int = 0) -> grpc.StatusCode:
            request = gateway_pb2.PublishRequest(
                stream=stream,
                partition=partition,
                batch=messages_pb2.RecordBatch(arrow_ipc=data, count=count),
            )
            try:
                await stub.Publish(request, metadata=auth)
            except grpc.aio.AioRpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

        good = encode_batch(BatchColumns([b"ok"], [None], [None], [None], [None]))
        huge = encode_batch(
            BatchColumns([b"x" * (2 * 1024 * 1024)], [None], [None], [None], [None])
        )
        assert await publish(b"not arrow", 1) == grpc.StatusCode.INVALID_ARGUMENT
        assert await publish(good, 2) == grpc.StatusCode.INVALID_ARGUMENT
        assert await publish(huge, 1) == grpc.StatusCode.INVALID_ARGUMENT
        assert await publish(good, 1, partition=7) == grpc.StatusCode.INVALID_ARGUMENT
        # The gateway keeps serving after bad input.
        assert await publish(good, 1) == grpc.StatusCode.OK


async def test_send_batch_publishes_a_table_and_reports_every_offset(
    any_path_client: tamto_sdk.Client,
) -> None:
    stream = unique("table")
    await any_path_client.streams.ensure(stream, partitions=2)
    keys = [f"k{i % 5}".encode() for i in range(2000)]
    table = pa.table(
        {
            "payload": [f"m{i}".encode() for i in range(2000)],
            "key": pa.array(keys, pa.binary()),
        }
    )
    async with any_path_client.producer(stream, max_batch_messages=300) as producer:
        published = await (await producer.send_batch(table))
    assert len(published) == 2000
    got = await consume_n(any_path_client, stream, "reader", 2000)
    stored = {(m.partition, m.offset): (m.payload, m.key) for m in got}
    for i, (p, offset) in enumerate(
        zip(published.partitions.to_pylist(), published.offsets.to_pylist(), strict=True)
    ):
        assert stored[(p, offset)] == (f"m{i}".encode(), keys[i])
    assert all(m.id is not None for m in got)  # idempotence ids, as with send
