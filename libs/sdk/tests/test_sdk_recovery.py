"""Recovery: the SDK's retry policy and its channel's reconnect backoff.

A gateway that went away and came back is reached again within a second; the
backoff between retries is full jitter, capped; errors that retrying cannot fix
surface at once; a call cut off mid-call is retried only when it is deduplicated.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from sdk_fake_gateway import API_KEY, FakeGateway

from tamto_protocol.v1 import gateway_pb2_grpc
from tamto_sdk import ClientOptions, connect
from tamto_sdk._retry import Backoff, with_retries
from tamto_sdk.errors import Internal, InvalidArgument, TamtoError, Unavailable, from_rpc_error


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


async def test_backoff_is_full_jitter_up_to_a_doubling_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        asked.append((low, high))
        return high

    monkeypatch.setattr("tamto_sdk._retry.random.uniform", uniform)
    options = ClientOptions(retry_initial_backoff_s=0.05, retry_max_backoff_s=0.25)
    backoff = Backoff(options)
    for _ in range(5):
        backoff.next_delay()
    assert asked == [(0, 0.05), (0, 0.1), (0, 0.2), (0, 0.25), (0, 0.25)]


async def test_default_backoff_never_waits_more_than_a_quarter_second() -> None:
    backoff = Backoff(ClientOptions())
    delays = [backoff.next_delay() for _ in range(200)]
    assert all(d is not None and 0 <= d <= 0.25 for d in delays)
    assert min(d for d in delays if d is not None) < 0.125  # jitter reaches below half the cap


async def test_errors_retrying_cannot_fix_surface_at_once() -> None:
    attempts = 0

    async def refused() -> None:
        nonlocal attempts
        attempts += 1
        raise InvalidArgument("bad")

    started = time.monotonic()
    with pytest.raises(InvalidArgument):
        await with_retries(refused, ClientOptions())
    assert attempts == 1
    assert time.monotonic() - started < 0.1


async def test_retries_stop_at_the_deadline() -> None:
    attempts = 0

    async def down() -> None:
        nonlocal attempts
        attempts += 1
        raise Unavailable("down")

    options = ClientOptions(retry_deadline_s=0.3, retry_max_backoff_s=0.05)
    started = time.monotonic()
    with pytest.raises(Unavailable):
        await with_retries(down, options)
    assert 0.3 <= time.monotonic() - started < 0.6
    assert attempts > 3


@pytest.mark.parametrize(
    "details",
    [
        "Internal error from Core",
        "Received RST_STREAM with error code 2",
        "Stream removed",
        "Socket closed",
    ],
)
def test_a_connection_lost_mid_call_is_retriable_only_when_deduplicated(details: str) -> None:
    error = rpc_error(grpc.StatusCode.INTERNAL, details)
    plain = from_rpc_error(error)
    assert isinstance(plain, Internal)
    assert not plain.retriable
    deduplicated = from_rpc_error(error, deduplicated=True)
    assert isinstance(deduplicated, Unavailable)
    assert deduplicated.retriable
    assert deduplicated.code == "INTERNAL"
    assert details in deduplicated.message


def test_a_server_side_internal_error_stays_final_even_when_deduplicated() -> None:
    error = from_rpc_error(rpc_error(grpc.StatusCode.INTERNAL, "bug: offsets"), deduplicated=True)
    assert isinstance(error, Internal)
    assert not error.retriable
    refused = from_rpc_error(
        rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "Socket closed"), deduplicated=True
    )
    assert isinstance(refused, InvalidArgument)


async def serve(gateway: FakeGateway, port: int = 0) -> tuple[grpc.aio.Server, int]:
    """`gateway` served on `port` (0: a free one); the server and its port."""
    server = grpc.aio.server()
    gateway_pb2_grpc.add_GatewayServicer_to_server(gateway, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    assert port in (0, bound)
    await server.start()
    return server, bound


@pytest.fixture
async def restartable() -> tuple[FakeGateway, grpc.aio.Server, int]:
    gateway = FakeGateway()  # type: ignore[abstract]  # serves the RPCs the SDK tests use
    server, port = await serve(gateway)
    gateway.url = f"tamto://127.0.0.1:{port}"
    return gateway, server, port


async def test_a_call_waiting_on_a_gateway_that_comes_back_completes_within_a_second(
    restartable: tuple[FakeGateway, grpc.aio.Server, int],
) -> None:
    gateway, server, port = restartable
    # The defaults, as an application gets them: no test-only backoffs.
    client = await connect(gateway.url, api_key=API_KEY)
    try:
        await client.streams.ensure("s", partitions=1)
        await server.stop(grace=None)
        call = asyncio.create_task(client.streams.describe("s"))
        # Down for 4 s: with gRPC's default reconnect backoff (1 s, 1.6 s, 2.6 s, ...)
        # and the former 2 s retry cap, the channel was still waiting long after this.
        await asyncio.sleep(4)
        assert not call.done(), call
        server, _ = await serve(gateway, port)
        back = time.monotonic()
        info = await asyncio.wait_for(call, 10)
        resumed = time.monotonic() - back
        assert info.name == "s"
        assert resumed < 1.0, f"the call completed {resumed:.2f} s after the gateway came back"
    finally:
        await client.close()
        await server.stop(grace=None)


async def test_a_new_client_reaches_a_gateway_that_comes_back_within_a_second(
    restartable: tuple[FakeGateway, grpc.aio.Server, int],
) -> None:
    gateway, server, port = restartable
    await server.stop(grace=None)
    connecting = asyncio.create_task(connect(gateway.url, api_key=API_KEY))
    await asyncio.sleep(4)  # the outage the fresh channel backs off through
    assert not connecting.done()
    server, _ = await serve(gateway, port)
    back = time.monotonic()
    client = await asyncio.wait_for(connecting, 10)
    try:
        assert time.monotonic() - back < 1.0
    finally:
        await client.close()
        await server.stop(grace=None)


def test_tamto_errors_keep_their_cause() -> None:
    error: TamtoError = from_rpc_error(
        rpc_error(grpc.StatusCode.INTERNAL, "Stream removed"), deduplicated=True
    )
    assert isinstance(error.__cause__, grpc.aio.AioRpcError)
