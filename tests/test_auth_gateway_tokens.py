"""The Auth gRPC API over a real channel, wired by `setup` against real etcd and NATS.

The last check crosses into the gateway on purpose: the contract that matters
is that the gateway's verifier, fed only by GetJwks, accepts what Authenticate
issues.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import jwt
import pytest

from tamto_auth.config import AuthConfig
from tamto_auth.server import setup
from tamto_common.apikeys import ApiKey, new_api_key
from tamto_common.bus import connect_bus
from tamto_common.config import load_config, parse_endpoints
from tamto_common.grpc_errors import TranslateErrorsInterceptor
from tamto_common.membership import connect_etcd
from tamto_common.service import Runtime
from tamto_common.tokens import TokenVerifier
from tamto_protocol.v1 import auth_pb2, auth_pb2_grpc
from tamto_testing.grpc_servers import listen


@dataclass(frozen=True)
class RunningAuth:
    """A served auth instance: a stub on a real channel, and its development key."""

    stub: auth_pb2_grpc.AuthStub
    dev_key: ApiKey


@contextlib.asynccontextmanager
async def start_auth(
    data_dir: Path, etcd_endpoint: str, nats_url: str, dev_key: ApiKey
) -> AsyncIterator[RunningAuth]:
    config = load_config(
        AuthConfig,
        "auth",
        ["--data-dir", str(data_dir), "--token-ttl-s", "60"],
        environ={"TAMTO_AUTH_DEV_API_KEY": str(dev_key), "TAMTO_AUTH_DEV_SUBJECT": "dev-user"},
    )
    server = grpc.aio.server(interceptors=[TranslateErrorsInterceptor()])
    port = listen(server)
    async with contextlib.AsyncExitStack() as resources:
        etcd = await connect_etcd(parse_endpoints(etcd_endpoint))
        resources.push_async_callback(etcd.close)
        bus = await connect_bus(nats_url, name="test-auth")
        resources.push_async_callback(bus.close)
        await setup(config, Runtime("auth", server, etcd, bus, resources))
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield RunningAuth(auth_pb2_grpc.AuthStub(channel), dev_key)
        finally:
            await server.stop(None)


@pytest.fixture
async def auth(tmp_path: Path, etcd_endpoint: str, nats_url: str) -> AsyncIterator[RunningAuth]:
    async with start_auth(tmp_path, etcd_endpoint, nats_url, new_api_key()) as running:
        yield running


def verifier_for(stub: auth_pb2_grpc.AuthStub) -> TokenVerifier:
    async def fetch_jwks() -> str:
        response = await stub.GetJwks(auth_pb2.GetJwksRequest())
        jwks_json: str = response.jwks_json
        return jwks_json

    return TokenVerifier(fetch_jwks, issuer="tamto", audience="tamto")


async def authenticate_error(stub: auth_pb2_grpc.AuthStub, api_key: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Authenticate(auth_pb2.AuthRequest(api_key=api_key))
    return info.value


async def test_dev_key_gets_a_token_the_gateway_verifier_accepts(auth: RunningAuth) -> None:
    before = int(time.time())
    response = await auth.stub.Authenticate(auth_pb2.AuthRequest(api_key=str(auth.dev_key)))
    assert response.subject == "dev-user"
    assert before + 60 <= response.expires_at_unix <= int(time.time()) + 60
    principal = await verifier_for(auth.stub).verify(response.token)
    assert principal.subject == "dev-user"
    assert principal.expires_at == response.expires_at_unix


async def test_token_kid_is_in_the_jwks(auth: RunningAuth) -> None:
    response = await auth.stub.Authenticate(auth_pb2.AuthRequest(api_key=str(auth.dev_key)))
    jwks = jwt.PyJWKSet.from_json((await auth.stub.GetJwks(auth_pb2.GetJwksRequest())).jwks_json)
    assert jwt.get_unverified_header(response.token)["kid"] in {k.key_id for k in jwks.keys}


async def test_unknown_key_is_unauthenticated(auth: RunningAuth) -> None:
    error = await authenticate_error(auth.stub, str(new_api_key()))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == "invalid API key"


async def test_wrong_secret_is_unauthenticated(auth: RunningAuth) -> None:
    forged = ApiKey(key_id=auth.dev_key.key_id, secret=new_api_key().secret)
    error = await authenticate_error(auth.stub, str(forged))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == "invalid API key"


@pytest.mark.parametrize("text", ["", "hunter2", "Bearer xyz"])
async def test_malformed_key_is_unauthenticated(auth: RunningAuth, text: str) -> None:
    error = await authenticate_error(auth.stub, text)
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == "malformed API key"


async def test_restart_keeps_signing_key_so_old_tokens_verify(
    tmp_path: Path, etcd_endpoint: str, nats_url: str
) -> None:
    dev_key = new_api_key()
    async with start_auth(tmp_path, etcd_endpoint, nats_url, dev_key) as first:
        issued = await first.stub.Authenticate(auth_pb2.AuthRequest(api_key=str(dev_key)))
        first_jwks = (await first.stub.GetJwks(auth_pb2.GetJwksRequest())).jwks_json
    async with start_auth(tmp_path, etcd_endpoint, nats_url, dev_key) as second:
        second_jwks = (await second.stub.GetJwks(auth_pb2.GetJwksRequest())).jwks_json
        assert second_jwks == first_jwks
        principal = await verifier_for(second.stub).verify(issued.token)
        assert principal.subject == "dev-user"
