"""The direct path (docs/cluster.md section 5): a producer publishes straight
to the router owning each partition, routers check tokens and permissions as the
gateway does, redirect a publish for a partition they do not own, and a client
writing while its router dies follows the new owner without loss or duplicates."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

import tamto_sdk
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_sdk import ClientOptions
from tamto_sdk.direct import DirectPublisher
from tamto_sdk.security import Grant, Permission
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import running_infra
from tamto_testing.waiting import eventually, long_tests_enabled

pytestmark = pytest.mark.e2e

ROUTER_PUBLISH = "/tamto.v1.Router/Publish"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def direct_of(client: tamto_sdk.Client) -> DirectPublisher:
    direct = client._calls.direct
    assert isinstance(direct, DirectPublisher), (
        "the client was made with ClientOptions(direct=True)"
    )
    return direct


async def router_publish(
    address: str, token: str | None, stream: str, partition: int
) -> grpc.aio.AioRpcError | None:
    """One raw Router.Publish of one message; the error it ended with, or None."""
    batch = encode_batch(BatchColumns([b"x"], [None], [None], [None], [None]))
    request = gateway_pb2.PublishRequest(
        stream=stream,
        partition=partition,
        batch=messages_pb2.RecordBatch(arrow_ipc=batch, count=1),
    )
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with grpc.aio.insecure_channel(address) as channel:
        publish = channel.unary_unary(
            ROUTER_PUBLISH,
            request_serializer=gateway_pb2.PublishRequest.SerializeToString,
            response_deserializer=gateway_pb2.PublishResponse.FromString,
        )
        try:
            await publish(request, metadata=metadata, timeout=30)
        except grpc.aio.AioRpcError as exc:
            return exc
    return None


async def lookup(
    cluster: TestCluster, token: str, stream: str, root_certificates: bytes | None = None
) -> dict[int, str]:
    """Each partition's owner's client address, as `Gateway.Lookup` answers."""
    address = cluster.address("gateway")
    channel = (
        grpc.aio.insecure_channel(address)
        if root_certificates is None
        else grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(root_certificates))
    )
    async with channel:
        answer = await gateway_pb2_grpc.GatewayStub(channel).Lookup(
            gateway_pb2.LookupRequest(stream=stream),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=30,
        )
    return {p.partition: p.address for p in answer.partitions}


async def read_by_position(
    client: tamto_sdk.Client, stream: str, count: int, timeout_s: float
) -> dict[tuple[int, int], bytes]:
    """Receive and ack `count` messages on the subscription "reader": (partition,
    offset) → payload."""
    got: dict[tuple[int, int], bytes] = {}
    async with client.consumer(stream, "reader") as consumer:
        while len(got) < count:
            batch = await consumer.receive_batch(max_messages=count, timeout_s=timeout_s)
            assert batch, f"only {len(got)} of {count} messages arrived"
            got.update({(m.partition, m.offset): m.payload for m in batch})
            consumer.ack(batch)
    return got


async def test_a_direct_producer_publishes_to_the_owner_and_consumers_get_it_all(
    tamto_cluster: TestCluster,
) -> None:
    stream = unique("direct")
    options = ClientOptions(direct=True)
    async with tamto_sdk.connect(
        tamto_cluster.url, api_key=tamto_cluster.credential, options=options
    ) as client:
        await client.streams.ensure(stream, partitions=2)
        async with client.producer(stream) as producer:
            acked = [
                await producer.send_and_wait(f"m{i}".encode(), key=f"k{i}".encode())
                for i in range(40)
            ]
        direct = direct_of(client)
        assert (direct.direct_batches, direct.proxied_batches) == (40, 0)
        got = await read_by_position(client, stream, 40, timeout_s=60)
    assert got == {(r.partition, r.offset): f"m{i}".encode() for i, r in enumerate(acked)}


async def test_a_router_checks_the_token_and_the_publish_permission(
    tamto_cluster: TestCluster,
) -> None:
    identity, role, stream = unique("reader"), unique("reader-role"), unique("guarded")
    async with tamto_sdk.connect(tamto_cluster.url, api_key=tamto_cluster.credential) as admin:
        await admin.streams.ensure(stream)
        await admin.security.create_identity(identity)
        key = await admin.security.create_api_key(identity)
        await admin.security.put_role(role, [Grant(Permission.CONSUME, stream)])
        await admin.security.bind(identity, role)
        async with tamto_sdk.connect(tamto_cluster.url, api_key=key.api_key) as reader:
            token = (await reader.security.token())[0]
        owner = (await lookup(tamto_cluster, token, stream))[0]
    assert owner == tamto_cluster.address("router")
    denied = await router_publish(owner, token, stream, 0)
    assert denied is not None
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "publish" in (denied.details() or ""), denied.details()
    anonymous = await router_publish(owner, None, stream, 0)
    assert anonymous is not None
    assert anonymous.code() == grpc.StatusCode.UNAUTHENTICATED
    # The same client's producer, direct, is refused the same way, not sent round.
    async with tamto_sdk.connect(
        tamto_cluster.url, api_key=key.api_key, options=ClientOptions(direct=True)
    ) as reader:
        async with reader.producer(stream) as producer:
            with pytest.raises(tamto_sdk.errors.PermissionDenied):
                await producer.send_and_wait(b"x")


@dataclass
class Writer:
    """A direct producer writing one message at a time; every acked message, by where
    it was stored."""

    producer: tamto_sdk.Producer
    direct: DirectPublisher
    cluster: TestCluster
    token: str
    stream: str
    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)

    async def write(self, count: int) -> None:
        for _ in range(count):
            i = len(self.acked)
            r = await self.producer.send_and_wait(f"m{i}".encode(), key=f"k{i}".encode())
            assert (r.partition, r.offset) not in self.acked
            self.acked[(r.partition, r.offset)] = f"m{i}".encode()

    async def writes_directly_to(self, address: str) -> bool:
        """Write 8 more: whether partition 0's owner is `address` and they went direct."""
        before = self.direct.direct_batches
        await self.write(8)
        now = await lookup(self.cluster, self.token, self.stream)
        return now[0] == address and self.direct.direct_batches >= before + 8


async def test_a_client_follows_its_partitions_when_they_move_and_their_router_dies(
    tmp_path: Path,
) -> None:
    """Two routers, a direct producer writing one message at a time while a consumer
    reads: its cached owners go stale (it follows the routers' redirects), partition 0
    is moved to the other router (a planned move), then that router is killed -9 (the
    client falls back to the gateway and returns to the survivor). The reader gets every
    acked message while it goes on; every acked message is stored once, nothing more.

    On an etcd and NATS of its own: on the session's, the router of this module's
    `tamto_cluster` (still running) is a third live router, and the ring gives it
    partitions of this stream."""
    total = 2_000 if long_tests_enabled() else 120
    stream = unique("moving")
    with (
        running_infra(tmp_path / "infra") as infra,
        TestCluster(tmp_path / "cluster", infra, nodes=2).running() as cluster,
    ):
        options = ClientOptions(direct=True, retry_deadline_s=60)
        async with tamto_sdk.connect(
            cluster.url, api_key=cluster.credential, options=options
        ) as client:
            await client.streams.ensure(stream, partitions=4)
            token = (await client.security.token())[0]
            owners = await lookup(cluster, token, stream)
            routers = {cluster.address(r): r for r in cluster.routers()}
            assert set(owners.values()) <= set(routers), owners
            other = next(a for a in routers if a != owners[0])
            await check_a_router_redirects_to_the_owner(other, token, stream, owners[0])

            read: dict[tuple[int, int], bytes] = {}

            async def reader(consumer: tamto_sdk.Consumer) -> None:
                async for m in consumer:  # a redelivery after the kill comes again, alike
                    assert read.setdefault((m.partition, m.offset), m.payload) == m.payload
                    consumer.ack(m)

            async with (
                client.producer(stream) as producer,
                client.consumer(stream, "live") as live,
                asyncio.TaskGroup() as readers,
            ):
                reading = readers.create_task(reader(live))
                writer = Writer(producer, direct_of(client), cluster, token, stream)
                await move_and_kill_while_writing(client, writer, routers, owners, total)
                await eventually(
                    lambda: all(k in read for k in writer.acked), 120, "the reader to get every ack"
                )
                reading.cancel()
            assert {k: read[k] for k in writer.acked} == writer.acked
            await check_each_acked_message_is_stored_once(client, stream, writer.acked)


async def check_a_router_redirects_to_the_owner(
    address: str, token: str, stream: str, owner: str
) -> None:
    """A stale owner: a router asked for a partition it does not own redirects."""
    error = await router_publish(address, token, stream, 0)
    assert error is not None
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
    assert dict(error.trailing_metadata() or ())["tamto-owner"] == owner


async def move_and_kill_while_writing(
    client: tamto_sdk.Client,
    writer: Writer,
    routers: dict[str, str],
    owners: dict[int, str],
    total: int,
) -> None:
    """Write `total` messages while the client's cache goes stale, partition 0 moves to
    the other router and that router is killed -9."""
    direct, stream, cluster = writer.direct, writer.stream, writer.cluster
    other = next(a for a in routers if a != owners[0])
    await writer.write(total // 4)
    assert direct.proxied_batches == 0
    # A stale cache (every partition on the router that does not own it): each
    # first publish is redirected and resent to the owner, none goes round.
    stale = {a: o for a, o in zip(routers, list(routers)[::-1], strict=True)}
    direct._owners[stream] = [stale[owners[p]] for p in range(4)]
    await writer.write(8)
    assert direct.redirects > 0
    assert direct.proxied_batches == 0
    # A planned move: the client follows partition 0 to its new owner.
    await client.cluster.move_partition(stream, 0, cluster.instance_id(routers[other]))
    await eventually(lambda: writer.writes_directly_to(other), 60, "direct writes to the new owner")
    await writer.write(total // 4)
    # The new owner dies: the gateway's path until the client looks up again.
    cluster.kill9(routers[other])
    await writer.write(total // 4)
    assert direct.proxied_batches > 0, "the batches for the dead owner went round"
    await eventually(
        lambda: writer.writes_directly_to(owners[0]), 60, "direct writes to the survivor"
    )
    await writer.write(max(0, total - len(writer.acked)))


async def check_each_acked_message_is_stored_once(
    client: tamto_sdk.Client, stream: str, acked: dict[tuple[int, int], bytes]
) -> None:
    """A fresh subscription reads every acked message once, and nothing beyond them."""
    got: dict[tuple[int, int], bytes] = {}
    async with client.consumer(stream, "check") as consumer:
        while len(got) < len(acked):
            # Patient: after the kill -9 a lull is slow under load, not lost.
            batch = await consumer.receive_batch(max_messages=1000, timeout_s=60)
            assert batch, f"only {len(got)} of {len(acked)} acked messages arrived"
            for m in batch:
                assert (m.partition, m.offset) not in got
                got[(m.partition, m.offset)] = m.payload
            consumer.ack(batch)
        # Nothing beyond what was acked (no resend stored at a new offset).
        extra = await consumer.receive_batch(max_messages=10, timeout_s=1)
    assert not extra, [m.payload for m in extra]
    assert got == acked
