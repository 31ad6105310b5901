"""Delivery semantics that issue 18 found broken, each checked on real processes.

- A cumulative ack on a shared or key-shared subscription cannot settle messages
  another consumer holds (the SDK refuses it; the router never applies it).
- A rejected ack reaches the application as its own status, never INTERNAL.
- A consumer that vanishes (kill -9) always uses up a delivery; a clean close is
  an explicit message, not the end of a stream.

Races are repeated in a loop: a short run by default, the acceptance size (50)
with TAMTO_LONG_TESTS=1 (docs/testing.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

import tamto_sdk
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_sdk import SubscriptionType
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import long_tests_enabled
from tests.e2e.test_bad_input import publish
from tests.e2e.test_subscriptions import take, unique

pytestmark = pytest.mark.e2e

#: Repetitions of each race: CI's short run, or the acceptance size.
REPEATS = 50 if long_tests_enabled() else 5


class RawConsumer:
    """A consume stream spoken directly in protobuf: it can send what the SDK never would."""

    def __init__(self, cluster: TestCluster) -> None:
        self._cluster = cluster
        self._requests: asyncio.Queue[messages_pb2.ConsumeRequest | None] = asyncio.Queue()
        self._channel: grpc.aio.Channel | None = None
        self.call: grpc.aio.StreamStreamCall | None = None

    async def __aenter__(self) -> RawConsumer:
        self._channel = grpc.aio.insecure_channel(self._cluster.gateway_address)
        stub = gateway_pb2_grpc.GatewayStub(self._channel)
        token = (
            await stub.Authenticate(
                gateway_pb2.AuthenticateRequest(api_key=self._cluster.credential)
            )
        ).token

        async def feed() -> AsyncIterator[messages_pb2.ConsumeRequest]:
            while (request := await self._requests.get()) is not None:
                yield request

        self.call = stub.Consume(feed(), metadata=[("authorization", f"Bearer {token}")])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._channel is not None
        await self._channel.close()

    def send(self, request: messages_pb2.ConsumeRequest) -> None:
        self._requests.put_nowait(request)

    def half_close(self) -> None:
        self._requests.put_nowait(None)

    async def offsets(self, n: int, within_s: float = 15) -> list[int]:
        """The offsets of the next `n` delivered messages."""
        assert self.call is not None
        got: list[int] = []
        async with asyncio.timeout(within_s):
            while len(got) < n:
                response = await self.call.read()
                assert response is not grpc.aio.EOF, f"stream ended after {got}"
                batch = response.delivery.batch
                got.extend(
                    response.delivery.offsets
                    or range(batch.base_offset, batch.base_offset + batch.count)
                )
        return got

    async def end(self, within_s: float = 15) -> grpc.StatusCode:
        """Read until the stream ends; its status."""
        assert self.call is not None
        async with asyncio.timeout(within_s):
            while await self.call.read() is not grpc.aio.EOF:
                pass
        return await self.call.code()


def subscribe(stream: str, sub: str, kind: int) -> messages_pb2.ConsumeRequest:
    return messages_pb2.ConsumeRequest(
        subscribe=messages_pb2.Subscribe(stream=stream, subscription=sub, type=kind)
    )


def credit(n: int) -> messages_pb2.ConsumeRequest:
    return messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=n))


def ack(first: int, last: int) -> messages_pb2.ConsumeRequest:
    return messages_pb2.ConsumeRequest(
        ack=messages_pb2.PartitionAcks(
            partition=0, ranges=[messages_pb2.OffsetRange(first=first, last=last)]
        )
    )


# -- 1. cumulative acks on shared and key-shared subscriptions --------------------


@pytest.mark.parametrize("kind", [SubscriptionType.SHARED, SubscriptionType.KEY_SHARED])
async def test_the_sdk_refuses_a_cumulative_ack_on_shared_subscriptions(
    tamto_client: tamto_sdk.Client, kind: SubscriptionType
) -> None:
    stream = unique("cumul-sdk")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, 3)
    async with tamto_client.consumer(stream, "work", type=kind) as consumer:
        [first, *_] = await take(consumer, 3)
        with pytest.raises(tamto_sdk.FailedPrecondition, match="ack_cumulative is not allowed"):
            consumer.ack_cumulative(first)


async def test_a_range_ack_never_settles_what_another_shared_consumer_holds(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    """The issue's scenario: A holds 0-1, B holds 2-4, A gets 5 and acks 0-5 as a range;
    B leaves without acking: 2-4 must come again (before the fix they never did)."""
    stream = unique("cumul-router")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, 10)
    shared = messages_pb2.SUBSCRIPTION_TYPE_SHARED
    async with RawConsumer(tamto_cluster) as a:
        a.send(subscribe(stream, "work", shared))
        a.send(credit(2))
        assert await a.offsets(2) == [0, 1]
        b = tamto_client.consumer(stream, "work", type=SubscriptionType.SHARED, credits=3)
        async with b:
            assert [m.offset for m in await take(b, 3)] == [2, 3, 4]
            a.send(credit(1))
            assert await a.offsets(1) == [5]
            a.send(ack(0, 5))
            a.half_close()
            assert await a.end() == grpc.StatusCode.OK
            # B leaves without acking what it holds.
    async with tamto_client.consumer(stream, "work", type=SubscriptionType.SHARED) as c:
        again = sorted(m.offset for m in await take(c, 7))
    assert again == [2, 3, 4, 6, 7, 8, 9]
