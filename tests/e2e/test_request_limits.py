"""The lists in a request are bounded, and a request at its bound costs a server
little (docs/validation.md).

An ack naming 16,000 disjoint ranges once held a router's event loop about
14 s (its cost grew with the square of the ranges), and a schema-mismatch error
quoting a whole schema reached the client as RESOURCE_EXHAUSTED about trailing
metadata. Here every list over its limit is INVALID_ARGUMENT naming the field
and the limit, and acks at the limit leave another client's publishes under
1 s and every process's memory within its stated bound.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import grpc
import pytest

import tamto_sdk
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.limits import MAX_GRANTS_PER_ROLE, MAX_RANGES_PER_REQUEST
from tamto_protocol.v1 import auth_pb2, gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_testing.cluster import TestCluster
from tamto_testing.hostile_requests import ack_of, disjoint_ranges, huge_schema_batch
from tests.e2e.gateway_calls import auth_metadata
from tests.e2e.members import resident_bytes
from tests.e2e.publish_probe import PUBLISH_BOUND_S, PublishProbe

pytestmark = [pytest.mark.e2e, pytest.mark.solo]

Code = grpc.StatusCode
#: What one consume stream's acks at the limit may add to a process's memory
#: (docs/validation.md, "Memory").
MEMORY_BOUND_BYTES = 64 * 1024 * 1024
#: Rounds of acks at the limit, each over offsets of its own.
ROUNDS = 5


Metadata = list[tuple[str, str]]


async def gateway_stub(
    cluster: TestCluster,
) -> tuple[gateway_pb2_grpc.GatewayStub, Metadata, grpc.aio.Channel]:
    """A stub on a channel of its own to the cluster's gateway, and a token's metadata."""
    channel = grpc.aio.insecure_channel(cluster.gateway_address)
    stub = gateway_pb2_grpc.GatewayStub(channel)
    return stub, await auth_metadata(stub, cluster.credential), channel


async def consume(
    stub: gateway_pb2_grpc.GatewayStub,
    metadata: list[tuple[str, str]],
    subscribe: messages_pb2.Subscribe,
    requests: list[messages_pb2.ConsumeRequest],
) -> tuple[grpc.StatusCode, str]:
    """A consume stream that sends `subscribe`, `requests` and a close, then
    half-closes; the status it ended with."""

    async def sent() -> AsyncIterator[messages_pb2.ConsumeRequest]:
        yield messages_pb2.ConsumeRequest(subscribe=subscribe)
        for request in requests:
            yield request
        yield messages_pb2.ConsumeRequest(close=messages_pb2.Close())

    try:
        async for _ in stub.Consume(sent(), metadata=metadata, timeout=120):
            pass
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return Code.OK, ""


async def test_every_list_over_its_limit_is_invalid_argument_naming_field_and_limit(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = f"limits-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    over = disjoint_ranges(MAX_RANGES_PER_REQUEST + 1)
    stub, metadata, channel = await gateway_stub(tamto_cluster)
    async with channel:
        subscribe = messages_pb2.Subscribe(stream=stream, subscription="s")
        verbs = {
            "ack": ack_of(0, over),
            "nack": messages_pb2.ConsumeRequest(
                nack=messages_pb2.PartitionNacks(partition=0, ranges=over)
            ),
            "term": messages_pb2.ConsumeRequest(
                term=messages_pb2.PartitionTerms(partition=0, ranges=over)
            ),
            "in_progress": messages_pb2.ConsumeRequest(
                in_progress=messages_pb2.PartitionProgress(partition=0, ranges=over)
            ),
        }
        expected = f"has {MAX_RANGES_PER_REQUEST + 1} elements; at most {MAX_RANGES_PER_REQUEST}"
        for verb, request in verbs.items():
            code, details = await consume(stub, metadata, subscribe, [request])
            assert code == Code.INVALID_ARGUMENT, (verb, code, details)
            assert f"{verb}.ranges {expected}" in details, details

        many = messages_pb2.Subscribe(stream=stream, subscription="s", partitions=range(1025))
        code, details = await consume(stub, metadata, many, [])
        assert code == Code.INVALID_ARGUMENT
        assert "partitions has 1025 elements" in details

        with pytest.raises(grpc.aio.AioRpcError) as seek:
            await stub.SeekSubscription(
                gateway_pb2.SeekSubscriptionRequest(
                    stream=stream,
                    subscription="s",
                    target=messages_pb2.SeekTarget(earliest=True),
                    partitions=[0] * 1025,
                ),
                metadata=metadata,
            )
        assert seek.value.code() == Code.INVALID_ARGUMENT
        assert "partitions has 1025 elements; at most 1024" in (seek.value.details() or "")

        grants = [auth_pb2.Grant(permission="consume", pattern="s")] * (MAX_GRANTS_PER_ROLE + 1)
        with pytest.raises(grpc.aio.AioRpcError) as role:
            await stub.PutRole(
                auth_pb2.PutRoleRequest(role=auth_pb2.Role(name="many", grants=grants)),
                metadata=metadata,
            )
        assert role.value.code() == Code.INVALID_ARGUMENT
        assert f"role.grants has {MAX_GRANTS_PER_ROLE + 1} elements" in (role.value.details() or "")


async def test_a_huge_schema_is_invalid_argument_with_a_short_message(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = f"schema-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    stub, metadata, channel = await gateway_stub(tamto_cluster)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Publish(
                gateway_pb2.PublishRequest(
                    stream=stream,
                    batch=messages_pb2.RecordBatch(arrow_ipc=huge_schema_batch(), count=1),
                ),
                metadata=metadata,
            )
    details = refused.value.details() or ""
    assert refused.value.code() == Code.INVALID_ARGUMENT, details[:300]
    assert "column 'key' has type struct<" in details
    assert len(details) < 1000


async def test_acks_at_the_limit_leave_another_clients_publishes_fast(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = f"acks-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    per_round = 2 * MAX_RANGES_PER_REQUEST
    stub, metadata, channel = await gateway_stub(tamto_cluster)
    async with channel:
        none = [None] * per_round
        batch = encode_batch(BatchColumns([b"x"] * per_round, none, none, none, none))
        for _ in range(ROUNDS):
            await stub.Publish(
                gateway_pb2.PublishRequest(
                    stream=stream, batch=messages_pb2.RecordBatch(arrow_ipc=batch, count=per_round)
                ),
                metadata=metadata,
            )
        before = {
            s: await resident_bytes(tamto_cluster, s) for s in ("gateway", "router", "storage")
        }
        acks = [
            ack_of(0, disjoint_ranges(MAX_RANGES_PER_REQUEST, r * per_round)) for r in range(ROUNDS)
        ]
        subscribe = messages_pb2.Subscribe(stream=stream, subscription="s")
        with PublishProbe(tamto_cluster) as probe:
            assert await consume(stub, metadata, subscribe, acks) == (Code.OK, "")
        after = {s: await resident_bytes(tamto_cluster, s) for s in before}
    info = await tamto_client.subscriptions.describe(stream, "s")
    assert info.backlog_messages == ROUNDS * per_round // 2, "every ack applied"
    assert probe.slowest < PUBLISH_BOUND_S, sorted(probe.latencies)[-5:]
    grown = {s: after[s] - before[s] for s in before}
    assert all(g < MEMORY_BOUND_BYTES for g in grown.values()), grown
