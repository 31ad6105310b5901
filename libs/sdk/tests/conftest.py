from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from sdk_fake_gateway import API_KEY, FAST, FakeGateway

from tamto_protocol.v1 import gateway_pb2_grpc
from tamto_sdk import Client, connect
from tamto_testing.grpc_servers import listen


@pytest.fixture
async def gateway() -> AsyncIterator[FakeGateway]:
    fake = FakeGateway()  # type: ignore[abstract]  # serves the RPCs the SDK tests use
    server = grpc.aio.server()
    gateway_pb2_grpc.add_GatewayServicer_to_server(fake, server)
    port = listen(server)
    await server.start()
    fake.url = f"tamto://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        await server.stop(grace=None)


@pytest.fixture
async def client(gateway: FakeGateway) -> AsyncIterator[Client]:
    c = await connect(gateway.url, api_key=API_KEY, options=FAST)
    try:
        yield c
    finally:
        await c.close()
