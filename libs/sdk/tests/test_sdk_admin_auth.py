from __future__ import annotations

from dataclasses import replace

import grpc
import pytest
from sdk_fake_gateway import API_KEY, FAST, FakeGateway

from tamto_protocol.v1 import messages_pb2
from tamto_sdk import Client, StreamConfig, TamtoError, connect
from tamto_sdk.errors import FailedPrecondition, InvalidArgument, NotFound, Unauthenticated
from tamto_sdk.stream_config import Durability, StreamInfo, StreamKind


async def test_connect_authenticates_and_sends_bearer_token(gateway: FakeGateway) -> None:
    async with connect(gateway.url, api_key=API_KEY, options=FAST) as client:
        assert gateway.auth_calls == 1
        await client.streams.ensure("orders", partitions=3)
        await client.streams.describe("orders")
        await client.streams.list()
    token = next(iter(gateway.valid_tokens))
    assert [m for m, _ in gateway.authorizations] == [
        "EnsureStream",
        "DescribeStream",
        "ListStreams",
    ]
    assert all(auth == f"Bearer {token}" for _, auth in gateway.authorizations)


async def test_bare_host_port_url_is_accepted(gateway: FakeGateway) -> None:
    bare = gateway.url.removeprefix("tamto://")
    async with connect(bare, api_key=API_KEY, options=FAST) as client:
        assert await client.streams.list() == []


async def test_wrong_api_key_raises_unauthenticated(gateway: FakeGateway) -> None:
    with pytest.raises(Unauthenticated) as info:
        await connect(gateway.url, api_key="wrong", options=FAST)
    assert info.value.code == "UNAUTHENTICATED"
    assert not info.value.retriable


async def test_reauthenticates_once_when_token_is_rejected(
    gateway: FakeGateway, client: Client
) -> None:
    gateway.add_stream("s", 1)
    gateway.revoke_tokens()
    info = await client.streams.describe("s")
    assert info.partitions == 1
    assert gateway.auth_calls == 2
    # The refused call and the retried one carried different tokens.
    first, second = (auth for _, auth in gateway.authorizations)
    assert first != second


async def test_renews_token_before_expiry(gateway: FakeGateway) -> None:
    gateway.token_ttl_s = 10  # within the 30 s refresh margin: every call renews first
    async with connect(gateway.url, api_key=API_KEY, options=FAST) as client:
        await client.streams.list()
        await client.streams.list()
    assert gateway.auth_calls == 3
    assert len({auth for _, auth in gateway.authorizations}) == 2


async def test_ensure_describe_list(client: Client, gateway: FakeGateway) -> None:
    created = await client.streams.ensure("orders", partitions=4)
    assert created.created
    assert created.stream.name == "orders"
    assert created.stream.partitions == 4
    assert created.stream.kind is StreamKind.PERSISTENT
    assert created.stream.config == StreamConfig()
    assert created.differences == []

    again = await client.streams.ensure("orders", partitions=2)
    assert not again.created
    assert again.stream.partitions == 4
    assert again.differences == ["partitions: stored 4, requested 2"]

    with pytest.raises(FailedPrecondition):
        await client.streams.ensure("orders", partitions=2, overwrite=True)

    assert (await client.streams.describe("orders")).partitions == 4
    assert [s.name for s in await client.streams.list()] == ["orders"]


FULL = StreamConfig(
    retention_ms=86_400_000,
    retention_bytes=1 << 30,
    dedup_window_ms=60_000,
    ack_timeout_ms=5_000,
    max_deliveries=5,
    max_lag=1000,
    dead_letter_stream="orders.poison",
    durability=Durability.INTERVAL,
    fsync_interval_ms=20,
    replication_factor=3,
    ack_quorum=2,
)


async def test_ensure_sends_every_setting_and_describe_returns_them(
    client: Client, gateway: FakeGateway
) -> None:
    result = await client.streams.ensure("orders", partitions=3, config=FULL)
    sent = gateway.ensure_requests[-1]
    assert sent.name == "orders"
    assert not sent.overwrite
    config = sent.config
    assert (config.partitions, config.retention_ms, config.retention_bytes) == (
        3,
        86_400_000,
        1 << 30,
    )
    assert (config.dedup_window_ms, config.ack_timeout_ms) == (60_000, 5_000)
    assert (config.max_deliveries, config.max_lag) == (5, 1000)
    assert config.dead_letter_stream == "orders.poison"
    assert config.durability == messages_pb2.DURABILITY_INTERVAL
    assert (config.replication_factor, config.ack_quorum) == (3, 2)
    assert config.fsync_interval_ms == 20
    assert config.kind == messages_pb2.STREAM_KIND_PERSISTENT

    assert result.stream.config == FULL
    described = await client.streams.describe("orders")
    assert described == StreamInfo("orders", 3, StreamKind.PERSISTENT, FULL)
    assert [s.config for s in await client.streams.list()] == [FULL]


async def test_differences_are_reported_and_overwrite_sends_the_request(
    client: Client, gateway: FakeGateway
) -> None:
    await client.streams.ensure("orders", partitions=2, config=FULL)
    changed = replace(FULL, ack_timeout_ms=9_000, durability=Durability.GROUP_COMMIT)
    changed = replace(changed, fsync_interval_ms=0)

    kept = await client.streams.ensure("orders", partitions=2, config=changed)
    assert not kept.created
    assert [d.split(":")[0] for d in kept.differences] == [
        "ack_timeout_ms",
        "durability",
        "fsync_interval_ms",
    ]
    assert kept.stream.config == FULL

    applied = await client.streams.ensure("orders", partitions=2, config=changed, overwrite=True)
    assert gateway.ensure_requests[-1].overwrite
    assert applied.stream.config == changed
    assert (await client.streams.describe("orders")).config == changed


async def test_delete(client: Client, gateway: FakeGateway) -> None:
    await client.streams.ensure("doomed")
    assert await client.streams.delete("doomed") is True
    assert "doomed" not in gateway.streams
    with pytest.raises(NotFound):
        await client.streams.describe("doomed")
    assert await client.streams.delete("doomed") is False
    assert [m for m, _ in gateway.authorizations].count("DeleteStream") == 2


@pytest.mark.parametrize(
    ("partitions", "config", "message"),
    [
        (0, StreamConfig(), "partitions must be between 1 and 4294967295, got 0"),
        (-3, StreamConfig(), "partitions must be between 1 and 4294967295, got -3"),
        (1, StreamConfig(retention_ms=-1), "retention_ms must be between 0 and"),
        (1, StreamConfig(max_deliveries=2**32), "max_deliveries must be between 0 and 4294967295"),
        (
            1,
            StreamConfig(durability="interval"),  # type: ignore[arg-type]
            "durability must be a tamto_sdk.stream_config.Durability",
        ),
    ],
)
async def test_values_the_wire_cannot_carry_are_refused_locally(
    client: Client, gateway: FakeGateway, partitions: int, config: StreamConfig, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await client.streams.ensure("orders", partitions=partitions, config=config)
    assert gateway.ensure_requests == []


def test_stream_info_keeps_its_positional_shape() -> None:
    info = StreamInfo("s", 2)
    assert info.kind is StreamKind.PERSISTENT
    assert info.config == StreamConfig()
    assert info.config.ack_timeout_ms == 30_000
    assert info.config.dedup_window_ms == 120_000
    assert info.config.durability is Durability.GROUP_COMMIT


async def test_describe_missing_stream_raises_not_found(client: Client) -> None:
    with pytest.raises(NotFound) as info:
        await client.streams.describe("nope")
    assert isinstance(info.value, TamtoError)
    assert info.value.code == "NOT_FOUND"
    assert isinstance(info.value.__cause__, grpc.aio.AioRpcError)
