"""External OIDC issuers (at the gateway and, for the direct path, at routers), TLS with
mTLS between services, and the plaintext-on-TLS error."""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from grpc_health.v1 import health_pb2, health_pb2_grpc

import tamto_sdk
from tamto_common.tls import TlsMaterial
from tamto_local.tls import ensure_dev_pki
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc
from tamto_sdk import ClientOptions
from tamto_sdk.direct import DirectPublisher
from tamto_sdk.security import Grant, Permission
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.processes import wait_for
from tamto_testing.waiting import eventually

from .test_direct_path import lookup, read_by_position, router_publish
from .test_launcher import Launcher

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def public_jwk(key: Any, kid: str, alg: str) -> dict[str, Any]:
    algorithm = jwt.algorithms.RSAAlgorithm if alg == "RS256" else jwt.algorithms.ECAlgorithm
    jwk: dict[str, Any] = algorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


def id_token(key: Any, kid: str, alg: str, issuer: str, audience: str, sub: str) -> str:
    now = int(time.time())
    body = {"iss": issuer, "aud": audience, "sub": sub, "iat": now, "exp": now + 300}
    return jwt.encode(body, key, algorithm=alg, headers={"kid": kid})


@pytest.fixture
def jwks_server() -> Iterator[tuple[str, dict[str, Any]]]:
    """A JWKS served over HTTP on 127.0.0.1; the dict is what it serves."""
    served: dict[str, Any] = {"keys": []}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(served).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_external_oidc_issuers_from_a_file_and_a_url(
    tamto_infra: Infra, tmp_path: Path, jwks_server: tuple[str, dict[str, Any]]
) -> None:
    url, served = jwks_server
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    jwks_file = tmp_path / "corp-jwks.json"
    jwks_file.write_text(json.dumps({"keys": [public_jwk(rsa_key, "corp-1", "RS256")]}))
    served["keys"] = [public_jwk(ec_key, "web-1", "ES256")]
    issuers = [
        {
            "name": "corp",
            "issuer": "https://login.corp.test",
            "audience": "tamto-prod",
            "jwks_file": str(jwks_file),
        },
        {"name": "web", "issuer": "https://web.test", "audience": "tamto", "jwks_url": url},
    ]
    issuers_file = tmp_path / "issuers.json"
    issuers_file.write_text(json.dumps(issuers))
    cluster = TestCluster(tmp_path / "cluster", tamto_infra)
    try:
        cluster.start_all({"gateway": {"TAMTO_GATEWAY_OIDC_ISSUERS_FILE": str(issuers_file)}})
        stream, role = unique("oidc"), unique("oidc-role")
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as admin:
            await admin.streams.ensure(stream)
            await admin.security.put_role(role, [Grant(Permission.PUBLISH, stream)])
            await admin.security.bind("corp:alice", role)
        corp = id_token(
            rsa_key, "corp-1", "RS256", "https://login.corp.test", "tamto-prod", "alice"
        )
        web = id_token(ec_key, "web-1", "ES256", "https://web.test", "tamto", "bob")
        async with grpc.aio.insecure_channel(cluster.gateway_address) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)

            async def whoami(token: str) -> Any:
                return await stub.WhoAmI(
                    gateway_pb2.WhoAmIRequest(), metadata=(("authorization", f"Bearer {token}"),)
                )

            async def refusal(token: str) -> str:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await whoami(token)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
                return info.value.details() or ""

            me = await whoami(corp)
            assert me.subject == "corp:alice"
            assert list(me.roles) == [role]
            assert (await whoami(web)).subject == "web:bob"  # keys fetched over HTTP

            wrong_aud = id_token(
                rsa_key, "corp-1", "RS256", "https://login.corp.test", "tamto", "alice"
            )
            assert await refusal(wrong_aud) == "token audience mismatch"
            stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            forged = id_token(
                stranger, "corp-1", "RS256", "https://login.corp.test", "tamto-prod", "alice"
            )
            assert await refusal(forged) == "token signature invalid"
            unknown_issuer = id_token(
                rsa_key, "corp-1", "RS256", "https://evil.test", "tamto-prod", "alice"
            )
            assert await refusal(unknown_issuer) == "token issuer not trusted"
            # A key the IdP starts using later is fetched from the URL on first sight.
            new_key = ec.generate_private_key(ec.SECP256R1())
            served["keys"] = [*served["keys"], public_jwk(new_key, "web-2", "ES256")]
            later = id_token(new_key, "web-2", "ES256", "https://web.test", "tamto", "carol")

            async def carol_admitted() -> bool:
                try:
                    assert (await whoami(later)).subject == "web:carol"
                except grpc.aio.AioRpcError:
                    return False  # not yet: refetches are rate-limited to one per 5 s
                return True

            await eventually(carol_admitted, 10, "the IdP's new key fetched", interval_s=0.2)
    finally:
        cluster.stop_all()


async def test_a_router_accepts_an_external_issuers_token_on_the_direct_path(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks_file = tmp_path / "corp-jwks.json"
    jwks_file.write_text(json.dumps({"keys": [public_jwk(key, "corp-1", "RS256")]}))
    issuers_file = tmp_path / "issuers.json"
    corp = {"name": "corp", "issuer": "https://login.corp.test", "audience": "tamto"}
    issuers_file.write_text(json.dumps([{**corp, "jwks_file": str(jwks_file)}]))
    cluster = TestCluster(tmp_path / "cluster", tamto_infra)
    # One setting for both (the shared environment): gateways and routers verify alike.
    trusted = {"TAMTO_OIDC_ISSUERS_FILE": str(issuers_file)}
    try:
        cluster.start_all({"gateway": trusted, "router": trusted})
        stream, role = unique("oidc-direct"), unique("oidc-direct-role")
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as admin:
            await admin.streams.ensure(stream)
            await admin.security.put_role(role, [Grant(Permission.PUBLISH, stream)])
            await admin.security.bind("corp:alice", role)

        def token_of(sub: str, audience: str = "tamto") -> str:
            return id_token(key, "corp-1", "RS256", corp["issuer"], audience, sub)

        # The gateway names the owner; the owner takes the publish with the same token.
        owner = (await lookup(cluster, token_of("alice"), stream))[0]
        assert owner == cluster.address("router")

        async def alice_publishes() -> bool:
            # The router learns the new binding from etcd's watch, a moment after the
            # gateway that made it: until then it refuses alice, never anything else.
            error = await router_publish(owner, token_of("alice"), stream, 0)
            if error is not None and error.code() != grpc.StatusCode.PERMISSION_DENIED:
                raise AssertionError(f"the router refused alice: {error.code()} {error.details()}")
            return error is None

        await eventually(alice_publishes, 15.0, "the owner router takes alice's publish")
        # The router checks the token and the permission as the gateway does.
        wrong_audience = await router_publish(owner, token_of("alice", "other"), stream, 0)
        assert wrong_audience is not None
        assert wrong_audience.code() == grpc.StatusCode.UNAUTHENTICATED
        assert wrong_audience.details() == "token audience mismatch"
        stranger = await router_publish(owner, token_of("mallory"), stream, 0)
        assert stranger is not None
        assert stranger.code() == grpc.StatusCode.PERMISSION_DENIED
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as admin:
            async with admin.consumer(stream, "check") as consumer:
                (message,) = await consumer.receive_batch(max_messages=10, timeout_s=30)
        assert message.payload == b"x"
    finally:
        cluster.stop_all()


def test_bad_oidc_configuration_stops_the_gateway_with_one_line(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    issuers_file = tmp_path / "issuers.json"
    issuers_file.write_text(
        json.dumps(
            [
                {
                    "name": "x",
                    "issuer": "i",
                    "audience": "a",
                    "jwks_file": "f",
                    "algorithms": ["HS256"],
                }
            ]
        )
    )
    cluster = TestCluster(tmp_path / "cluster", tamto_infra)
    try:
        with pytest.raises(AssertionError, match="algorithms must be among"):
            cluster.start_all({"gateway": {"TAMTO_GATEWAY_OIDC_ISSUERS_FILE": str(issuers_file)}})
    finally:
        cluster.stop_all()


@pytest.fixture(scope="module")
def tls_cluster(
    tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestCluster]:
    with TestCluster(
        tmp_path_factory.mktemp("tls-cluster"), tamto_infra, tls=True
    ).running() as cluster:
        yield cluster


async def test_tls_cluster_publishes_and_consumes_over_mtls(tls_cluster: TestCluster) -> None:
    assert tls_cluster.url.startswith("tamtos://")
    options = ClientOptions(root_certificates=tls_cluster.ca_file.read_bytes())
    stream = unique("tls")
    async with tamto_sdk.connect(
        tls_cluster.url, api_key=tls_cluster.credential, options=options
    ) as client:
        await client.streams.ensure(stream, partitions=2)
        async with client.producer(stream) as producer:
            for i in range(10):
                await producer.send(f"m{i}".encode())
        got = []
        async with client.consumer(stream, "reader") as consumer:
            async for message in consumer:
                got.append(message.payload)
                consumer.ack(message)
                if len(got) == 10:
                    break
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(10))
    log = (tls_cluster.workdir / "logs" / "router.log").read_text()
    assert '"tls": "require"' in log


async def test_a_tls_client_publishes_directly_to_the_owning_router(
    tls_cluster: TestCluster,
) -> None:
    """The direct path under TLS: the router serves clients on a listener of its own
    (TLS, no client certificate, the cluster's CA), advertised by `Lookup`, and the
    SDK, verifying it with the CA it verifies the gateway with, publishes there."""
    ca = tls_cluster.ca_file.read_bytes()
    stream = unique("tls-direct")
    async with tamto_sdk.connect(
        tls_cluster.url,
        api_key=tls_cluster.credential,
        options=ClientOptions(root_certificates=ca),
    ) as client:
        await client.streams.ensure(stream, partitions=2)
        token = (await client.security.token())[0]
        async with client.producer(stream) as producer:
            acked = [await producer.send_and_wait(f"m{i}".encode()) for i in range(20)]
        direct = client._calls.direct
        assert isinstance(direct, DirectPublisher), "the direct path is the default"
        assert (direct.direct_batches, direct.proxied_batches) == (20, 0)
        got = await read_by_position(client, stream, 20, timeout_s=30)
    assert got == {(r.partition, r.offset): f"m{i}".encode() for i, r in enumerate(acked)}
    owners = await lookup(tls_cluster, token, stream, root_certificates=ca)
    client_address = owners[0]
    assert client_address != tls_cluster.address("router"), "clients get a port of their own"
    # It serves only what clients call: no health, no service RPC, even with a token.
    with pytest.raises(grpc.RpcError) as info:
        health(client_address, grpc.ssl_channel_credentials(root_certificates=ca))
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # And only over TLS.
    refused = await router_publish(client_address, token, stream, 0)
    assert refused is not None
    assert refused.code() == grpc.StatusCode.UNAVAILABLE


def health(address: str, credentials: grpc.ChannelCredentials | None) -> int:
    channel = (
        grpc.insecure_channel(address)
        if credentials is None
        else grpc.secure_channel(address, credentials)
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status)


def test_internal_services_require_a_client_certificate_from_the_ca(
    tls_cluster: TestCluster, tmp_path: Path
) -> None:
    assert tls_cluster.tls_dir is not None
    ca = tls_cluster.ca_file.read_bytes()
    client = ensure_dev_pki(tls_cluster.tls_dir, ["client"])["client"]
    stranger = ensure_dev_pki(tmp_path / "other-ca", ["client"])["client"]
    for service in ("router", "storage", "auth"):
        address = tls_cluster.address(service)
        good = TlsMaterial.load(client.cert, client.key, client.ca, True)
        assert health(address, good.channel_credentials()) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError):  # TLS without a client certificate
            health(address, grpc.ssl_channel_credentials(root_certificates=ca))
        with pytest.raises(grpc.RpcError):  # a certificate from another CA
            health(
                address,
                grpc.ssl_channel_credentials(
                    root_certificates=ca,
                    private_key=stranger.key.read_bytes(),
                    certificate_chain=stranger.cert.read_bytes(),
                ),
            )
        with pytest.raises(grpc.RpcError):  # plaintext
            health(address, None)
    # The gateway serves applications: TLS without a client certificate is fine there.
    gateway = tls_cluster.address("gateway")
    assert (
        health(gateway, grpc.ssl_channel_credentials(root_certificates=ca))
        == health_pb2.HealthCheckResponse.SERVING
    )


async def test_plaintext_client_on_a_tls_gateway_gets_a_clear_error(
    tls_cluster: TestCluster,
) -> None:
    plain = f"tamto://{tls_cluster.gateway_address}"
    options = ClientOptions(retry_deadline_s=0)
    with pytest.raises(tamto_sdk.errors.Unavailable) as info:
        await tamto_sdk.connect(plain, api_key=tls_cluster.credential, options=options)
    assert str(info.value) == (
        f"the server at {tls_cluster.gateway_address} requires TLS, but this client connected "
        f"in plaintext: use tamtos://{tls_cluster.gateway_address} (and the server's CA "
        "certificate)"
    )
    # The server side says so in its log too (gRPC's TLS handshake failure).
    gateway_log = tls_cluster.workdir / "logs" / "gateway.log"
    wait_for(
        lambda: "WRONG_VERSION_NUMBER" in gateway_log.read_text(errors="replace"),
        10,
        "the gateway to log the failed handshake",
    )


async def test_tls_client_on_a_plaintext_gateway_gets_a_clear_error(
    tamto_cluster: TestCluster,
) -> None:
    tls = f"tamtos://{tamto_cluster.gateway_address}"
    with pytest.raises(tamto_sdk.errors.Unavailable) as info:
        await tamto_sdk.connect(
            tls, api_key=tamto_cluster.credential, options=ClientOptions(retry_deadline_s=0)
        )
    assert str(info.value) == (
        f"the server at {tamto_cluster.gateway_address} does not speak TLS, but this client "
        f"connected with TLS: use tamto://{tamto_cluster.gateway_address}"
    )


def test_up_tls_makes_a_dev_ca_and_runs_the_demo_over_tls(tmp_path: Path) -> None:
    data = tmp_path / "data"
    launcher = Launcher(data, tmp_path / "up.log")
    result = launcher.run("--tls", "--demo", "--once", "--quiet")
    assert result.returncode == 0, result.stdout[-3000:]
    assert f"gateway: tamtos://127.0.0.1:{launcher.gateway}" in result.stdout
    assert "consumed and acked 1000 messages" in result.stdout
    for name in ("ca", "auth", "storage", "router", "gateway", "launcher"):
        assert (data / "tls" / f"{name}.pem").exists()
    assert (data / "tls" / "ca-key.pem").stat().st_mode & 0o077 == 0
