"""A publish may not cost the cluster more than its limits say: a compressed batch is
refused before it is unpacked, the message limit covers key, headers and id too,
and an event time no reader can represent is refused (docs/validation.md, Sizes
and values). Each is INVALID_ARGUMENT naming what is wrong; nothing is stored."""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc
import pytest

import tamto_sdk
from tamto_protocol.batch import MAX_EVENT_TIME_US
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc
from tamto_testing.cluster import TestCluster
from tamto_testing.oversized_batches import BOMB_ROWS, bomb, one_message
from tests.e2e.gateway_calls import auth_metadata, raw_publish

pytestmark = pytest.mark.e2e

MIB = 1 << 20


def rss_bytes(pid: int) -> int:
    """A process's resident memory."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def test_oversized_and_unreadable_messages_are_refused_at_the_gateway(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = f"limits-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    gateway_pid = tamto_cluster.processes["gateway"].pid
    assert gateway_pid is not None
    async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        metadata = await auth_metadata(stub, tamto_cluster.credential)

        async def publish(data: bytes, count: int = 1) -> gateway_pb2.PublishResponse:
            return await raw_publish(stub, metadata, stream, data, count)

        async def refused(data: bytes, count: int = 1) -> str:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await publish(data, count)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            return raised.value.details() or ""

        await publish(one_message())  # the gateway's first batch allocates what all do
        before = rss_bytes(gateway_pid)
        # ~72 MB of zeros in a few KB, each payload under the 1 MiB limit.
        for _ in range(3):
            assert "refused before unpacking" in await refused(bomb(), BOMB_ROWS)
        assert rss_bytes(gateway_pid) - before < 32 * MIB
        # A 1-byte payload does not carry a 2 MB key or 2 MB of headers past the limit.
        assert "its key take 2000000 bytes, over the cap" in await refused(
            one_message(key=b"k" * 2_000_000)
        )
        assert "its headers take 2000001 bytes, over the cap" in await refused(
            one_message(headers={"h": "v" * 2_000_000})
        )
        assert "over the message limit of 1048576" in await refused(
            one_message(payload=b"p" * (MIB - 100), key=b"k" * 1000)
        )
        assert "column 'event_time'" in await refused(
            one_message(event_time_us=MAX_EVENT_TIME_US + 1)
        )
        stored = await publish(one_message(payload=b"kept", event_time_us=MAX_EVENT_TIME_US))
        assert stored.base_offset == 1  # only the first publish was stored before it

    async with tamto_client.consumer(stream, "reader") as consumer:
        batch = await consumer.receive_batch(max_messages=10, timeout_s=10)
        messages = list(batch)
        while len(messages) < 2:
            more = await consumer.receive_batch(max_messages=10, timeout_s=10)
            assert len(more) > 0, "a stored message did not arrive"
            messages.extend(more)
        assert [m.payload for m in messages] == [b"p", b"kept"]
        far = messages[1].event_time
        assert far is not None
        assert far.year == 9999
