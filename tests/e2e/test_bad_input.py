"""Bad input gets a precise error or a bounded effect, and the system keeps serving others."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest

import tamto_sdk
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_testing.cluster import TestCluster

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def publish(client: tamto_sdk.Client, stream: str, n: int) -> None:
    async with client.producer(stream) as producer:
        await asyncio.gather(*[await producer.send(f"m{i}".encode()) for i in range(n)])


async def raw_consume(
    cluster: TestCluster, requests: list[messages_pb2.ConsumeRequest]
) -> grpc.aio.AioRpcError:
    """Send `requests` on a raw consume stream and return the error that ends it."""
    async with grpc.aio.insecure_channel(cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        token = (
            await stub.Authenticate(gateway_pb2.AuthenticateRequest(api_key=cluster.credential))
        ).token

        refused = asyncio.Event()

        async def feed() -> AsyncIterator[messages_pb2.ConsumeRequest]:
            for request in requests:
                yield request
            # Keep the stream open; half-close once the in-band error came, as the
            # SDK does (the gateway then ends the stream with its status).
            await asyncio.wait_for(refused.wait(), 30)

        call = stub.Consume(feed(), metadata=[("authorization", f"Bearer {token}")])
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await asyncio.wait_for(_drain(call, refused), 20)
        return error.value


async def _drain(call: grpc.aio.StreamStreamCall, refused: asyncio.Event) -> None:
    async for response in call:
        if response.WhichOneof("response") == "error":
            refused.set()


def subscribe(stream: str, sub: str = "s") -> messages_pb2.ConsumeRequest:
    return messages_pb2.ConsumeRequest(
        subscribe=messages_pb2.Subscribe(stream=stream, subscription=sub)
    )


def credit(n: int) -> messages_pb2.ConsumeRequest:
    return messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=n))


async def test_acking_an_offset_that_does_not_exist_is_invalid_argument(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = unique("ackbad")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, 3)
    bad_ack = messages_pb2.ConsumeRequest(
        ack=messages_pb2.PartitionAcks(
            partition=0, ranges=[messages_pb2.OffsetRange(first=5, last=1_000_000)]
        )
    )
    error = await raw_consume(tamto_cluster, [subscribe(stream), credit(10), bad_ack])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot ack offsets 5-1000000" in (error.details() or "")
    await publish(tamto_client, stream, 1)  # still serving


async def test_consume_streams_must_start_with_a_valid_subscribe(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = unique("subbad")
    await tamto_client.streams.ensure(stream, partitions=1)
    no_subscribe = await raw_consume(tamto_cluster, [credit(5)])
    assert no_subscribe.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "must start with subscribe" in (no_subscribe.details() or "")
    illegal = await raw_consume(tamto_cluster, [subscribe(stream, "no/slashes")])
    assert illegal.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "illegal subscription name" in (illegal.details() or "")
    unknown = await raw_consume(tamto_cluster, [subscribe(unique("nowhere"))])
    assert unknown.code() == grpc.StatusCode.NOT_FOUND
    twice = await raw_consume(tamto_cluster, [subscribe(stream), subscribe(stream)])
    assert twice.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_consumer_that_never_acks_has_a_bounded_effect(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("lazy")
    await tamto_client.streams.ensure(
        stream, partitions=1, config=tamto_sdk.StreamConfig(ack_timeout_ms=300)
    )
    await publish(tamto_client, stream, 50)
    async with (
        tamto_client.consumer(stream, "never-acks", credits=10) as lazy,
        tamto_client.consumer(stream, "busy") as busy,
    ):
        first = await lazy.receive_batch(max_messages=10, timeout_s=10)
        assert len(first) > 0
        # Its messages come back after the ack timeout, counted...
        again = await lazy.receive_batch(max_messages=10, timeout_s=10)
        while again and again.delivery_count == 1:
            again = await lazy.receive_batch(max_messages=10, timeout_s=10)
        assert again.delivery_count >= 2
        # ...while another subscription consumes everything, unhindered.
        got = 0
        while got < 50:
            batch = await busy.receive_batch(max_messages=50, timeout_s=10)
            assert len(batch) > 0, f"busy subscription stalled at {got}"
            got += len(batch)
            busy.ack(batch)


async def test_a_slow_consumer_never_slows_the_others(tamto_client: tamto_sdk.Client) -> None:
    stream = unique("slow")
    await tamto_client.streams.ensure(stream, partitions=2)
    async with tamto_client.consumer(stream, "slow", credits=1) as slow:
        await publish(tamto_client, stream, 300)
        await slow.receive_batch(max_messages=1, timeout_s=10)  # takes one, then stalls
        async with tamto_client.consumer(stream, "fast") as fast:
            got = 0
            while got < 300:
                batch = await fast.receive_batch(max_messages=300, timeout_s=10)
                assert len(batch) > 0, f"fast subscription stalled at {got}"
                got += len(batch)
                fast.ack(batch)
