"""Hundreds (10,000 with `TAMTO_LONG_TESTS=1`) of consume streams over one client connection beyond the gateway's
per-connection limit are each refused with RESOURCE_EXHAUSTED naming the limit,
never INTERNAL "Internal error from Core" (a client's write racing with the end of
its stream hid the refusal; docs/validation.md, Refusals a client can read)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

import tamto_sdk
from tamto_protocol.v1 import gateway_pb2_grpc, messages_pb2
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually, long_tests_enabled
from tests.e2e.gateway_calls import auth_metadata
from tests.e2e.members import metrics_of

pytestmark = pytest.mark.e2e

#: The per-connection limit, and the streams opened at once over the one connection:
#: the acceptance's (`TAMTO_LONG_TESTS=1`) is the hostile-input review's 10,000 past a
#: limit of 1,000, where 4,632 of the 9,000 refused read INTERNAL before the fix. CI's
#: size did not reproduce that on a loaded 2-core machine (2,000 passed
#: before it): the late writer below is the mechanism, reproduced at any size.
LIMIT = int(os.environ.get("TAMTO_LIMIT_STATUS_LIMIT") or (1_000 if long_tests_enabled() else 5))
CROWD = int(
    os.environ.get("TAMTO_LIMIT_STATUS_CROWD") or (10_000 if long_tests_enabled() else 1_000)
)


@pytest.fixture(scope="module")
def cluster(tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    limits = {"gateway": {"TAMTO_GATEWAY_MAX_CONSUMERS_PER_CONNECTION": str(LIMIT)}}
    with TestCluster(tmp_path_factory.mktemp("limit"), tamto_infra).running(limits) as running:
        yield running


async def serving(cluster: TestCluster, count: int) -> bool:
    """Whether the gateway has `count` consume streams serving."""
    page = await metrics_of(cluster, "gateway")
    return f'tamto_gateway_consume_handlers{{step="serving"}} {float(count)}' in page


async def ending(call: grpc.aio.StreamStreamCall) -> tuple[grpc.StatusCode, str]:
    """The status a consume stream ends with (an in-band `StreamError` is answered as
    the SDK does: half-close, then the stream's own status)."""
    try:
        while (response := await call.read()) is not grpc.aio.EOF:
            if response.WhichOneof("response") == "error":
                await call.done_writing()
        return await call.code(), await call.details() or ""
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""


@contextlib.asynccontextmanager
async def raw_gateway(
    cluster: TestCluster, prefix: str
) -> AsyncIterator[tuple[str, gateway_pb2_grpc.GatewayStub, list[tuple[str, str]]]]:
    """A new one-partition stream, a gateway stub on a connection of its own (the one
    connection the limit counts on) and the metadata that authenticates its calls."""
    stream = f"{prefix}-{uuid.uuid4().hex[:8]}"
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(stream, partitions=1)
    async with grpc.aio.insecure_channel(cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        yield stream, stub, await auth_metadata(stub, cluster.credential)


#: How late the slow client writes its first credit: past the 2 s the gateway used to
#: wait for a refused client's half-close, as a client loop busy with 10,000 streams was.
LATE_CREDIT_S = 3.0


async def test_a_client_writing_late_still_reads_resource_exhausted(cluster: TestCluster) -> None:
    """A client that writes its first credit seconds after the refusal went out (its
    event loop busy elsewhere) reads the refusal, not INTERNAL."""
    async with raw_gateway(cluster, "late") as (stream, stub, metadata):
        subscribe = messages_pb2.Subscribe(stream=stream, subscription="late")
        subscribe.type = messages_pb2.SUBSCRIPTION_TYPE_SHARED
        taken = [stub.Consume(metadata=metadata, timeout=60) for _ in range(LIMIT)]
        for i, call in enumerate(taken):
            subscribe.consumer_name = f"taken{i}"
            await call.write(messages_pb2.ConsumeRequest(subscribe=subscribe))
        await eventually(lambda: serving(cluster, LIMIT), 30, f"{LIMIT} streams serving")
        late = stub.Consume(metadata=metadata, timeout=60)
        subscribe.consumer_name = "late"
        await late.write(messages_pb2.ConsumeRequest(subscribe=subscribe))
        await asyncio.sleep(LATE_CREDIT_S)  # the client's loop busy elsewhere
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await late.write(messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=1)))
        code, details = await ending(late)
        for call in taken:
            call.cancel()
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
    assert f"max_consumers_per_connection={LIMIT}" in details


async def test_every_stream_past_the_limit_reads_resource_exhausted(cluster: TestCluster) -> None:
    async with raw_gateway(cluster, "limit") as (stream, stub, metadata):

        async def consume(name: str) -> tuple[grpc.StatusCode, str] | None:
            """Open a stream as the SDK does (subscribe, then a credit at once); None
            if it was taken."""
            call = stub.Consume(metadata=metadata, timeout=60)
            subscribe = messages_pb2.Subscribe(
                stream=stream, subscription="crowd", consumer_name=name
            )
            subscribe.type = messages_pb2.SUBSCRIPTION_TYPE_SHARED
            try:
                await call.write(messages_pb2.ConsumeRequest(subscribe=subscribe))
                await call.write(
                    messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=100))
                )
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
                pass  # the stream already ended: its status says why
            try:
                async with asyncio.timeout(15):
                    return await ending(call)
            except TimeoutError:
                call.cancel()
                return None  # still open: one of the streams within the limit

        endings = await asyncio.gather(*(consume(f"c{i}") for i in range(CROWD)))
    refused = [e for e in endings if e is not None]
    assert len(refused) == CROWD - LIMIT, f"{CROWD - len(refused)} streams were taken"
    wrong = [e for e in refused if e[0] != grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert not wrong, f"{len(wrong)} of {len(refused)} ended otherwise: {wrong[:3]}"
    assert all(f"max_consumers_per_connection={LIMIT}" in details for _, details in refused)
