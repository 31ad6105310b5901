"""Subscribe's fields, consumer limits and the empty-key login, against real services.

A start time of -1 or 2^63-1, `partitions:
[0, 0, 0]` and a 10 KiB consumer name were accepted silently, an empty API key
was refused without an audit record, and nothing bounded the consumers of one
subscription or one connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

import tamto_sdk
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually
from tests.e2e.members import metrics_of

pytestmark = pytest.mark.e2e

PER_CONNECTION = 3
PER_SUBSCRIPTION = 4  # two connections hold them: per connection, 2 < 3


@pytest.fixture(scope="module")
def cluster(tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    limits = {
        "gateway": {"TAMTO_GATEWAY_MAX_CONSUMERS_PER_CONNECTION": str(PER_CONNECTION)},
        "router": {"TAMTO_ROUTER_MAX_CONSUMERS_PER_SUBSCRIPTION": str(PER_SUBSCRIPTION)},
    }
    with TestCluster(tmp_path_factory.mktemp("limits"), tamto_infra).running(limits) as running:
        yield running


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextlib.asynccontextmanager
async def gateway(cluster: TestCluster) -> AsyncIterator[tuple[gateway_pb2_grpc.GatewayStub, str]]:
    """A stub on one channel with a connection of its own, and a bearer token.
    (Channels to one address share a connection unless told otherwise.)"""
    own = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(cluster.gateway_address, options=own) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = gateway_pb2.AuthenticateRequest(api_key=cluster.credential)
        yield stub, (await stub.Authenticate(request)).token


def subscribe(
    stream: str,
    subscription: str = "s",
    time_us: int | None = None,
    partitions: tuple[int, ...] = (),
    consumer_name: str = "",
    consumer_id: str = "",
) -> messages_pb2.ConsumeRequest:
    sub = messages_pb2.Subscribe(
        stream=stream,
        subscription=subscription,
        partitions=list(partitions),
        consumer_name=consumer_name,
        consumer_id=consumer_id,
    )
    if time_us is not None:
        sub.start.time_us = time_us
    return messages_pb2.ConsumeRequest(subscribe=sub)


async def status_of(call: grpc.aio.StreamStreamCall) -> tuple[grpc.StatusCode, str]:
    """The status a consume stream ends with: sent in-band (`StreamError`) or as its status."""
    try:
        response = await call.read()
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    if response is grpc.aio.EOF:
        return await call.code(), await call.details()
    assert response.WhichOneof("response") == "error", f"expected an error, got {response}"
    code = next(c for c in grpc.StatusCode if c.value[0] == response.error.code)
    return code, response.error.message


async def refusal(
    cluster: TestCluster, request: messages_pb2.ConsumeRequest
) -> tuple[grpc.StatusCode, str]:
    async with gateway(cluster) as (stub, token):
        call = stub.Consume(metadata=[("authorization", f"Bearer {token}")], timeout=20)
        await call.write(request)
        return await status_of(call)


@pytest.fixture(scope="module")
def stream(cluster: TestCluster) -> str:
    name = unique("checked")

    async def make() -> None:
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            await client.streams.ensure(name, partitions=2)

    asyncio.run(make())
    return name


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"time_us": -1}, "start.time_us must be from 0 to 253402300799999999 .* got -1"),
        ({"time_us": 2**63 - 1}, f"start.time_us must be .* got {2**63 - 1}"),
        ({"partitions": (0, 0, 0)}, "partitions lists partition 0 more than once"),
        ({"consumer_name": "x" * 10 * 1024}, "consumer_name has 10240 characters; at most 256"),
        ({"consumer_id": "x" * 65}, "consumer_id has 65 characters; at most 64"),
        ({"consumer_id": "a\nb"}, "consumer_id must not contain control characters"),
    ],
    ids=[
        "time-minus-one",
        "time-max",
        "partitions-repeated",
        "long-consumer-name",
        "long-consumer-id",
        "control-in-consumer-id",
    ],
)
async def test_bad_subscribe_fields_are_invalid_argument(
    cluster: TestCluster, stream: str, fields: dict[str, Any], message: str
) -> None:
    code, details = await refusal(cluster, subscribe(stream, **fields))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert re.search(message, details), details


async def test_an_empty_api_key_is_refused_and_audited(cluster: TestCluster) -> None:
    async with grpc.aio.insecure_channel(cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.Authenticate(gateway_pb2.AuthenticateRequest(api_key=""))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    def audited() -> bool:
        path = cluster.audit_file("gateway")
        records = (
            [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        )
        return any(
            r["action"] == "authenticate"
            and r["outcome"] == "refused"
            and r["detail"] == "api_key is required"
            for r in records
        )

    await eventually(audited, 5, "the empty-key refusal in the gateway's audit file")


class Consumer:
    """A raw consume stream, its end watched in the background (a read
    cancelled by a timeout would cancel the call itself)."""

    def __init__(self, call: grpc.aio.StreamStreamCall) -> None:
        self.call = call
        self.ended: asyncio.Task[tuple[grpc.StatusCode, str]] = asyncio.create_task(status_of(call))

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await self.ended


async def open_consumer(
    stub: gateway_pb2_grpc.GatewayStub,
    token: str,
    stream: str,
    sub: str,
    kind: messages_pb2.SubscriptionType = messages_pb2.SUBSCRIPTION_TYPE_SHARED,
    consumer_id: str = "",
) -> Consumer:
    call = stub.Consume(metadata=[("authorization", f"Bearer {token}")])
    request = subscribe(stream, subscription=sub, consumer_id=consumer_id)
    request.subscribe.type = kind
    await call.write(request)
    return Consumer(call)


async def attached(consumers: list[Consumer], cluster: TestCluster, stream: str) -> None:
    """Wait until the router holds an attachment for each of `consumers` (every
    partition of `stream`), none of them having ended."""
    want = len(consumers) * 2  # the module's stream has 2 partitions

    async def all_there() -> bool:
        for consumer in consumers:
            assert not consumer.ended.done(), await consumer.ended
        return attached_count(await metrics_of(cluster, "router"), stream) >= want

    await eventually(all_there, 10, f"{len(consumers)} consumers attached")


async def released(cluster: TestCluster, stream: str, left: int) -> None:
    """Wait until the router holds attachments of only `left` consumers of `stream`."""

    async def let_go() -> bool:
        return attached_count(await metrics_of(cluster, "router"), stream) <= left * 2

    await eventually(let_go, 10, f"only {left} consumers attached")


def attached_count(metrics: str, stream: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("tamto_router_attached_consumers{") and f'stream="{stream}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_consume_streams_over_the_per_connection_limit_are_refused(
    cluster: TestCluster, stream: str
) -> None:
    async with gateway(cluster) as (stub, token):
        held = [
            await open_consumer(stub, token, stream, unique("c")) for _ in range(PER_CONNECTION)
        ]
        await attached(held, cluster, stream)
        extra = await open_consumer(stub, token, stream, unique("c"))
        code, details = await extra.ended
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        assert "max_consumers_per_connection=3" in details, details
        await held.pop().close()
        # The cancel is done at the client at once; the gateway gives the stream's place
        # on the connection back as it tears it down, in its own time, and only then ends
        # its sessions with the router: once the router let it go, there is room.
        await released(cluster, stream, len(held))
        again = await open_consumer(stub, token, stream, unique("c"))
        await attached([*held, again], cluster, stream)  # room again once one left
        for consumer in [*held, again]:
            await consumer.close()


async def test_consumers_over_the_per_subscription_limit_are_refused(
    cluster: TestCluster, stream: str
) -> None:
    sub = unique("crowded")
    async with contextlib.AsyncExitStack() as stack:
        stubs = [await stack.enter_async_context(gateway(cluster)) for _ in range(2)]
        held = []
        for i in range(PER_SUBSCRIPTION):
            stub, token = stubs[i % 2]
            held.append(await open_consumer(stub, token, stream, sub))
        await attached(held, cluster, stream)
        stub, token = stubs[0]
        extra = await open_consumer(stub, token, stream, sub)
        code, details = await extra.ended
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        assert "max_consumers_per_subscription=4" in details, details
        for consumer in held:
            await consumer.close()


async def test_a_consumer_subscribing_again_takes_the_place_of_its_unended_session(
    cluster: TestCluster, stream: str
) -> None:
    """A consumer back after a network fault subscribes again while the router still
    holds its earlier session (that stream's end not seen yet: here, never ended).
    With the same `consumer_id` it takes that session's place, which ends; another
    consumer is still refused by the exclusive subscription."""
    sub = unique("comeback")
    exclusive = messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE
    async with gateway(cluster) as (stub_a, token_a), gateway(cluster) as (stub_b, token_b):
        earlier = await open_consumer(stub_a, token_a, stream, sub, exclusive, "consumer-1")
        await attached([earlier], cluster, stream)
        again = await open_consumer(stub_b, token_b, stream, sub, exclusive, "consumer-1")
        code, details = await asyncio.wait_for(earlier.ended, 10)
        assert code == grpc.StatusCode.FAILED_PRECONDITION, details
        assert "a newer session of this consumer took its place" in details, details
        await attached([again], cluster, stream)
        other = await open_consumer(stub_a, token_a, stream, sub, exclusive, "consumer-2")
        code, details = await asyncio.wait_for(other.ended, 10)
        assert code == grpc.StatusCode.FAILED_PRECONDITION, details
        assert "already has a consumer (exclusive)" in details, details
        await again.close()
