"""Delivery semantics once found broken, each checked on real processes.

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
import contextlib
import dataclasses
import signal
import sys
import textwrap
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

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800 if long_tests_enabled() else 300)]

#: Repetitions of each race: CI's short run, or the acceptance size.
REPEATS = 50 if long_tests_enabled() else 10


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

    async def counts(self, n: int, within_s: float = 15) -> list[int]:
        """The delivery counts of the next `n` delivered messages."""
        assert self.call is not None
        got: list[int] = []
        async with asyncio.timeout(within_s):
            while len(got) < n:
                response = await self.call.read()
                assert response is not grpc.aio.EOF, f"stream ended after {len(got)}"
                got.extend([response.delivery.delivery_count] * response.delivery.batch.count)
        return got

    async def error(self, within_s: float = 15) -> tuple[grpc.StatusCode, str]:
        """Read until the server announces its error, half-close as the protocol asks,
        and return the status the stream then ends with."""
        assert self.call is not None
        async with asyncio.timeout(within_s):
            while True:
                response = await self.call.read()
                assert response is not grpc.aio.EOF, "the stream ended without an error"
                if response.WhichOneof("response") == "error":
                    break
            self.half_close()
            with contextlib.suppress(grpc.aio.AioRpcError):
                while await self.call.read() is not grpc.aio.EOF:
                    pass
        code = await self.call.code()
        assert code.value[0] == response.error.code, "the in-band status is the status"
        return code, await self.call.details() or ""

    async def end(self, within_s: float = 15) -> grpc.StatusCode:
        """Read until the stream ends; its status."""
        assert self.call is not None
        async with asyncio.timeout(within_s):
            while await self.call.read() is not grpc.aio.EOF:
                pass
        return await self.call.code()


def subscribe(
    stream: str, sub: str, kind: messages_pb2.SubscriptionType
) -> messages_pb2.ConsumeRequest:
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
    async with tamto_client.consumer(stream, "work", subscription_type=kind) as consumer:
        [first, *_] = await take(consumer, 3)
        with pytest.raises(
            tamto_sdk.errors.FailedPrecondition, match="ack_cumulative is not allowed"
        ):
            consumer.ack_cumulative(first)


async def a_holds_0_1_and_b_2_4(a: RawConsumer, b: RawConsumer, stream: str) -> None:
    """A joins the shared subscription "work" and takes 0-1, then B joins and takes 2-4."""
    shared = messages_pb2.SUBSCRIPTION_TYPE_SHARED
    a.send(subscribe(stream, "work", shared))
    a.send(credit(2))
    assert await a.offsets(2) == [0, 1]
    b.send(subscribe(stream, "work", shared))
    b.send(credit(3))
    assert await b.offsets(3) == [2, 3, 4]


async def test_a_range_ack_never_settles_what_another_shared_consumer_holds(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    """A holds 0-1, B holds 2-4, A gets 5 and acks 0-5 as a range; B leaves without
    acking: 2-4 must come again (a range ack settles only what its consumer holds)."""
    stream = unique("cumul-router")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, 10)
    async with RawConsumer(tamto_cluster) as a, RawConsumer(tamto_cluster) as b:
        await a_holds_0_1_and_b_2_4(a, b, stream)
        a.send(credit(1))
        assert await a.offsets(1) == [5]
        a.send(ack(0, 5))
        a.half_close()
        assert await a.end() == grpc.StatusCode.OK
        b.half_close()  # B leaves without acking what it holds
        assert await b.end() == grpc.StatusCode.OK
    async with tamto_client.consumer(
        stream, "work", subscription_type=SubscriptionType.SHARED
    ) as c:
        again = sorted(m.offset for m in await take(c, 7))
    assert again == [2, 3, 4, 6, 7, 8, 9]


async def test_a_nack_never_takes_back_what_another_shared_consumer_holds(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    """The same rule for nacks: A nacks 2-4, which B holds; before the fix they went
    back to the queue and A got them while B was still working on them."""
    stream = unique("nack-router")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, 10)
    async with RawConsumer(tamto_cluster) as a, RawConsumer(tamto_cluster) as b:
        await a_holds_0_1_and_b_2_4(a, b, stream)
        a.send(
            messages_pb2.ConsumeRequest(
                nack=messages_pb2.PartitionNacks(
                    partition=0, ranges=[messages_pb2.OffsetRange(first=0, last=4)]
                )
            )
        )
        a.send(credit(5))
        assert await a.offsets(5) == [0, 1, 5, 6, 7]


# -- 3. a rejected ack's status reaches the application ----------------------------


async def consume_until_it_fails(consumer: tamto_sdk.Consumer) -> None:
    """Take and ack messages until the consumer raises (15 s at most)."""
    async with asyncio.timeout(15):
        while True:
            for message in await consumer.receive_batch(5, timeout_s=1):
                assert message.delivery_count == 1, "redelivered: it reconnected"
                consumer.ack(message)


async def test_a_rejected_ack_reaches_the_application_as_invalid_argument(
    tamto_client: tamto_sdk.Client,
) -> None:
    """Before the fix, 10-40% of these ended with INTERNAL, which the SDK took for a
    transport race: it reconnected silently and redelivered (delivery_count 2)."""
    stream = unique("badack")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, 2000)
    for attempt in range(REPEATS):
        # A small credit window: credits and acks stream back while the bad ack lands.
        consumer = tamto_client.consumer(stream, f"s{attempt}", credits=10)
        async with consumer:
            [first] = await take(consumer, 1)
            consumer.ack(first)
            consumer.ack(dataclasses.replace(first, offset=1_000_000))  # never delivered
            with pytest.raises(tamto_sdk.TamtoError) as raised:
                await consume_until_it_fails(consumer)
            error = raised.value
            assert isinstance(error, tamto_sdk.errors.InvalidArgument), (
                f"attempt {attempt}: {error!r}"
            )
            assert "cannot ack offsets 1000000-1000000" in str(error)
            assert consumer.reconnects == 0


async def test_an_empty_consume_request_is_a_precise_invalid_argument(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = unique("empty-req")
    await tamto_client.streams.ensure(stream, partitions=1)
    exclusive = messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE
    async with RawConsumer(tamto_cluster) as raw:
        raw.send(subscribe(stream, "s", exclusive))
        raw.send(messages_pb2.ConsumeRequest())
        code, details = await raw.error()
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "a consume request must set one of" in details


# -- 4. a vanished consumer uses up a delivery; a clean close is explicit ----------

#: A consumer process: takes 5 messages without acking them, says so, and waits.
HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    import tamto_sdk

    async def main(url: str, key: str, stream: str, kind: str) -> None:
        async with tamto_sdk.connect(url, api_key=key) as client:
            consumer = client.consumer(
                stream, "work", subscription_type=tamto_sdk.SubscriptionType(kind), credits=5
            )
            async with consumer:
                held = []
                while len(held) < 5:
                    held.extend(await consumer.receive_batch(5 - len(held), timeout_s=20))
                print("held", *(m.offset for m in held), flush=True)
                await asyncio.Event().wait()

    asyncio.run(main(*sys.argv[1:]))
    """
)


@pytest.mark.parametrize("kind", [SubscriptionType.EXCLUSIVE, SubscriptionType.SHARED])
async def test_a_consumer_killed_with_sigkill_always_uses_up_a_delivery(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client, kind: SubscriptionType
) -> None:
    """Before the fix the gateway took a killed client's end of stream for a clean
    close in 20-50% of attempts: the next consumer saw delivery_count 1."""
    for attempt in range(REPEATS):
        stream = unique("sigkill")
        await tamto_client.streams.ensure(stream, partitions=1)
        await publish(tamto_client, stream, 5)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            HOLDER,
            tamto_cluster.url,
            tamto_cluster.credential,
            stream,
            kind.value,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert process.stdout is not None
            async with asyncio.timeout(60):
                line = await process.stdout.readline()
            assert line.split() == [b"held", b"0", b"1", b"2", b"3", b"4"], line
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()
        async with tamto_client.consumer(stream, "work", subscription_type=kind) as successor:
            again = await take(successor, 5, within_s=30)
            counts = [m.delivery_count for m in again]
            assert counts == [2] * 5, f"attempt {attempt}: delivery counts {counts}"
            successor.ack(again[-1])


async def test_only_an_explicit_close_hands_messages_back_without_a_delivery(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = unique("close")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, 5)
    async with tamto_client.consumer(stream, "work", credits=5) as polite:
        await take(polite, 5)
    # The SDK's close sent `close`: no delivery used up.
    exclusive = messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE
    async with RawConsumer(tamto_cluster) as raw:
        raw.send(subscribe(stream, "work", exclusive))
        raw.send(credit(5))
        assert await raw.counts(5) == [1] * 5
        raw.half_close()  # the end of the stream, without `close`
        assert await raw.end() == grpc.StatusCode.OK
    async with tamto_client.consumer(stream, "work") as successor:
        assert [m.delivery_count for m in await take(successor, 5)] == [2] * 5
