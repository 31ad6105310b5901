from __future__ import annotations

import grpc
import pytest
from sdk_fake_gateway import API_KEY, FAST, FakeGateway

from tamto_sdk import (
    Client,
    NotFound,
    StreamKind,
    TamtoError,
    Unauthenticated,
    connect,
)


async def test_connect_authenticates_and_sends_bearer_token(gateway: FakeGateway) -> None:
    async with await connect(gateway.url, api_key=API_KEY, options=FAST) as client:
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
    async with await connect(bare, api_key=API_KEY, options=FAST) as client:
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
    async with await connect(gateway.url, api_key=API_KEY, options=FAST) as client:
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
    assert created.differences == []

    again = await client.streams.ensure("orders", partitions=2)
    assert not again.created
    assert again.stream.partitions == 4
    assert again.differences == ["partitions: stored 4, got 2"]

    overwritten = await client.streams.ensure("orders", partitions=2, overwrite=True)
    assert overwritten.stream.partitions == 2

    assert (await client.streams.describe("orders")).partitions == 2
    assert [s.name for s in await client.streams.list()] == ["orders"]


async def test_describe_missing_stream_raises_not_found(client: Client) -> None:
    with pytest.raises(NotFound) as info:
        await client.streams.describe("nope")
    assert isinstance(info.value, TamtoError)
    assert info.value.code == "NOT_FOUND"
    assert isinstance(info.value.__cause__, grpc.aio.AioRpcError)
