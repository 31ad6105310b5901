"""Hundreds of consume streams over one client connection beyond the gateway's
per-connection limit are each refused with RESOURCE_EXHAUSTED naming the limit,
never INTERNAL "Internal error from Core" (a client's write racing with the end of
its stream hid the refusal; docs/validation.md, Refusals a client can read)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import grpc
import pytest

import tamto_sdk
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra

pytestmark = pytest.mark.e2e

LIMIT = 5
#: Streams opened at once over the one connection, beyond the limit.
CROWD = 300


@pytest.fixture(scope="module")
def cluster(tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    limits = {"gateway": {"TAMTO_GATEWAY_MAX_CONSUMERS_PER_CONNECTION": str(LIMIT)}}
    with TestCluster(tmp_path_factory.mktemp("limit"), tamto_infra).running(limits) as running:
        yield running


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


async def test_every_stream_past_the_limit_reads_resource_exhausted(cluster: TestCluster) -> None:
    stream = f"limit-{uuid.uuid4().hex[:8]}"
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(stream, partitions=1)
    async with grpc.aio.insecure_channel(cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        token = (
            await stub.Authenticate(gateway_pb2.AuthenticateRequest(api_key=cluster.credential))
        ).token
        metadata = [("authorization", f"Bearer {token}")]

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
