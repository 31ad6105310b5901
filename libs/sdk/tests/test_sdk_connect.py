"""The three ways to hold a connection: `async with connect(...)`, `await connect(...)`,
and `connect(...)` as a task."""

from __future__ import annotations

import asyncio

import pytest
from sdk_fake_gateway import API_KEY, FAST, FakeGateway

from tamto_sdk import Client, connect
from tamto_sdk.errors import Closed, Unauthenticated


async def test_async_with_connect_authenticates_and_closes_on_leaving(
    gateway: FakeGateway,
) -> None:
    async with connect(gateway.url, api_key=API_KEY, options=FAST) as client:
        assert isinstance(client, Client)
        assert gateway.auth_calls == 1
        await client.streams.ensure("orders", partitions=1)
    with pytest.raises(Closed):
        await client.streams.ensure("orders", partitions=1)


async def test_await_connect_still_gives_a_client_to_close(gateway: FakeGateway) -> None:
    client = await connect(gateway.url, api_key=API_KEY, options=FAST)
    try:
        async with client:
            await client.streams.ensure("orders", partitions=1)
        with pytest.raises(Closed):
            await client.streams.ensure("orders", partitions=1)
    finally:
        await client.close()


async def test_connect_runs_as_a_task(gateway: FakeGateway) -> None:
    client = await asyncio.create_task(connect(gateway.url, api_key=API_KEY, options=FAST))
    await client.close()
    assert gateway.auth_calls == 1


async def test_a_refused_key_raises_on_entering(gateway: FakeGateway) -> None:
    with pytest.raises(Unauthenticated):
        async with connect(gateway.url, api_key="wrong", options=FAST):
            pytest.fail("entered with a refused key")
