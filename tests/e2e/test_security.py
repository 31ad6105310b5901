"""Identities, roles and enforcement against the real gateway, auth, router and storage.

Every identity, role and stream here has a unique suffix: the module's cluster
shares etcd with the other test modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aetcd
import grpc
import jwt
import nats
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import tamto_sdk
from tamto_common.config import parse_endpoints
from tamto_common.membership import connect_etcd
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.v1 import auth_pb2, gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_sdk.security import Grant, IdentityKind, NewApiKey, Permission
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually, long_tests_enabled

pytestmark = pytest.mark.e2e

U = uuid.uuid4().hex[:6]
MATCHING = f"orders-{U}.eu"
OTHER = f"billing-{U}"
ROLES: dict[str, tuple[Grant, ...]] = {
    "none": (),
    "publisher": (Grant(Permission.PUBLISH, f"orders-{U}.*"),),
    "consumer": (Grant(Permission.CONSUME, f"orders-{U}.*"),),
    "admin": (Grant(Permission.ADMIN, f"orders-{U}.*"),),
}
OPERATIONS = ("publish", "consume", "ensure", "delete", "describe")
NEEDS = {
    "publish": {"publisher", "admin"},
    "consume": {"consumer", "admin"},
    "ensure": {"admin"},
    "delete": {"admin"},
    "describe": {"publisher", "consumer", "admin"},
}
MISSING = {
    "publish": "publish",
    "consume": "consume",
    "ensure": "admin",
    "delete": "admin",
    "describe": "publish, consume or admin",
}


def unique(prefix: str) -> str:
    return f"{prefix}-{U}-{uuid.uuid4().hex[:6]}"


async def admin_client(cluster: TestCluster) -> tamto_sdk.Client:
    return await tamto_sdk.connect(cluster.url, api_key=cluster.credential)


@dataclass(frozen=True)
class Matrix:
    tokens: dict[str, str]  # role label -> bearer token of an identity bound to it


async def _set_up_matrix(cluster: TestCluster) -> Matrix:
    tokens: dict[str, str] = {}
    async with await admin_client(cluster) as admin:
        for stream in (MATCHING, OTHER):
            await admin.streams.ensure(stream, partitions=1)
            async with admin.producer(stream) as producer:
                await producer.send_and_wait(b"seed")
        for label, grants in ROLES.items():
            identity = f"m-{label}-{U}"
            await admin.security.create_identity(identity, IdentityKind.SERVICE)
            key = await admin.security.create_api_key(identity)
            if grants:
                await admin.security.put_role(f"matrix-{label}-{U}", grants)
                await admin.security.bind(identity, f"matrix-{label}-{U}")
            async with tamto_sdk.connect(cluster.url, api_key=key.api_key) as client:
                tokens[label] = (await client.security.token())[0]
    return Matrix(tokens)


@pytest.fixture(scope="module")
def matrix(tamto_cluster: TestCluster) -> Matrix:
    return asyncio.run(_set_up_matrix(tamto_cluster))


@pytest.fixture
async def stub(tamto_cluster: TestCluster) -> AsyncIterator[gateway_pb2_grpc.GatewayStub]:
    async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
        yield gateway_pb2_grpc.GatewayStub(channel)


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


@dataclass(frozen=True)
class Refusal:
    """How a call ended when it did not succeed."""

    status: grpc.StatusCode
    message: str

    def code(self) -> grpc.StatusCode:
        return self.status

    def details(self) -> str:
        return self.message


async def attempt(
    stub: gateway_pb2_grpc.GatewayStub, token: str, operation: str, stream: str
) -> Refusal | None:
    """Run one operation with `token`; the error it ended with, or None if allowed."""
    md = bearer(token)
    try:
        if operation == "publish":
            batch = encode_batch(BatchColumns([b"x"], [None], [None], [None], [None]))
            await stub.Publish(
                gateway_pb2.PublishRequest(
                    stream=stream,
                    partition=0,
                    batch=messages_pb2.RecordBatch(arrow_ipc=batch, count=1),
                ),
                metadata=md,
                timeout=10,
            )
        elif operation == "consume":
            refusal = await consume_once(stub, md, stream)
            if refusal is not None:
                return refusal
        elif operation == "ensure":
            await stub.EnsureStream(
                gateway_pb2.EnsureStreamRequest(
                    name=stream, config=messages_pb2.StreamConfig(partitions=1)
                ),
                metadata=md,
                timeout=10,
            )
        elif operation == "delete":
            await stub.DeleteStream(
                gateway_pb2.DeleteStreamRequest(name=f"{stream}.absent"), metadata=md, timeout=10
            )
        elif operation == "describe":
            await stub.DescribeStream(
                gateway_pb2.DescribeStreamRequest(name=stream), metadata=md, timeout=10
            )
    except grpc.aio.AioRpcError as exc:
        return Refusal(exc.code(), exc.details() or "")
    return None


async def consume_once(stub: gateway_pb2_grpc.GatewayStub, md: Any, stream: str) -> Refusal | None:
    """Subscribe and grant one credit at once (as the SDK does): None if a message
    came, else the refusal (sent in-band first, then as the stream's status)."""
    call = stub.Consume(metadata=md, timeout=10)
    try:
        await call.write(
            messages_pb2.ConsumeRequest(
                subscribe=messages_pb2.Subscribe(stream=stream, subscription="matrix")
            )
        )
        with contextlib.suppress(asyncio.InvalidStateError, grpc.aio.AioRpcError):
            await call.write(messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=1)))
        response = await call.read()  # the seeded message, or the refusal
        if response is not grpc.aio.EOF and response.WhichOneof("response") == "error":
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass
            response = grpc.aio.EOF
    except grpc.aio.AioRpcError as exc:
        return Refusal(exc.code(), exc.details() or "")
    code = await call.code() if response is grpc.aio.EOF else grpc.StatusCode.OK
    call.cancel()
    if code != grpc.StatusCode.OK:
        return Refusal(code, await call.details())
    return None


@pytest.mark.parametrize("stream_matches", [True, False], ids=["matching", "other"])
@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("role", list(ROLES))
async def test_roles_x_operations_x_patterns(
    matrix: Matrix,
    stub: gateway_pb2_grpc.GatewayStub,
    role: str,
    operation: str,
    stream_matches: bool,
) -> None:
    stream = MATCHING if stream_matches else OTHER
    error = await attempt(stub, matrix.tokens[role], operation, stream)
    allowed = stream_matches and role in NEEDS[operation]
    if allowed:
        assert error is None, f"{role} {operation} {stream}: {error and error.details()}"
        return
    assert error is not None, f"{role} was allowed to {operation} {stream}"
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    target = f"{stream}.absent" if operation == "delete" else stream
    assert error.details() == (
        f"'m-{role}-{U}' lacks permission {MISSING[operation]} on stream '{target}'"
    )


async def test_list_streams_shows_only_permitted_streams(
    matrix: Matrix, stub: gateway_pb2_grpc.GatewayStub
) -> None:
    response = await stub.ListStreams(
        gateway_pb2.ListStreamsRequest(), metadata=bearer(matrix.tokens["consumer"])
    )
    names = {s.name for s in response.streams}
    assert MATCHING in names
    assert OTHER not in names
    none = await stub.ListStreams(
        gateway_pb2.ListStreamsRequest(), metadata=bearer(matrix.tokens["none"])
    )
    assert list(none.streams) == []


async def test_security_admin_needs_admin_on_everything(
    matrix: Matrix, tamto_cluster: TestCluster, stub: gateway_pb2_grpc.GatewayStub
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.CreateIdentity(
            auth_pb2.CreateIdentityRequest(name=unique("nope")),
            metadata=bearer(matrix.tokens["admin"]),
        )
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert info.value.details() == (f"'m-admin-{U}' lacks permission admin on '*' (all streams)")


async def test_every_call_needs_a_token(stub: gateway_pb2_grpc.GatewayStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ListStreams(gateway_pb2.ListStreamsRequest())
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert info.value.details() == "missing bearer token"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.WhoAmI(gateway_pb2.WhoAmIRequest())
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_policy_change_applies_within_a_second(
    tamto_cluster: TestCluster, stub: gateway_pb2_grpc.GatewayStub
) -> None:
    identity, role, stream = unique("late"), unique("late-role"), unique("late-stream")
    async with await admin_client(tamto_cluster) as admin:
        await admin.streams.ensure(stream)
        await admin.security.create_identity(identity)
        key = await admin.security.create_api_key(identity)
        await admin.security.put_role(role, [Grant(Permission.PUBLISH, stream)])
        async with tamto_sdk.connect(tamto_cluster.url, api_key=key.api_key) as client:
            token = (await client.security.token())[0]
        denied = await attempt(stub, token, "publish", stream)
        assert denied is not None
        assert denied.code() == grpc.StatusCode.PERMISSION_DENIED

        async def allowed() -> bool:
            return await attempt(stub, token, "publish", stream) is None

        async def refused() -> bool:
            error = await attempt(stub, token, "publish", stream)
            return error is not None and error.code() == grpc.StatusCode.PERMISSION_DENIED

        async def unauthenticated() -> bool:
            error = await attempt(stub, token, "publish", stream)
            return error is not None and error.code() == grpc.StatusCode.UNAUTHENTICATED

        await admin.security.bind(identity, role)
        await eventually(allowed, 1.0, "a new binding to take effect")
        await admin.security.put_role(role, [Grant(Permission.CONSUME, stream)])
        await eventually(refused, 1.0, "a narrowed role to take effect")
        await admin.security.put_role(role, [Grant(Permission.PUBLISH, stream)])
        await eventually(allowed, 1.0, "a widened role to take effect")
        await admin.security.unbind(identity, role)
        await eventually(refused, 1.0, "an unbinding to take effect")
        await admin.security.bind(identity, role)
        await eventually(allowed, 1.0, "a rebinding to take effect")
        # Disabling the identity stops its live token too, not only its keys.
        await admin.security.set_identity_disabled(identity, True)
        await eventually(unauthenticated, 1.0, "a disabled identity's token to stop working")
        error = await attempt(stub, token, "publish", stream)
        assert error is not None
        assert error.details() == f"identity {identity!r} is disabled"
        with pytest.raises(tamto_sdk.errors.Unauthenticated, match="is disabled"):
            await tamto_sdk.connect(tamto_cluster.url, api_key=key.api_key)


async def test_api_key_lifecycle(tamto_cluster: TestCluster) -> None:
    identity = unique("keys")
    async with await admin_client(tamto_cluster) as admin:
        created = await admin.security.create_identity(identity, IdentityKind.SERVICE)
        assert created.kind is IdentityKind.SERVICE
        first = await admin.security.create_api_key(identity)
        second = await admin.security.create_api_key(identity)
        listed = {i.name: i for i in await admin.security.list_identities()}[identity]
        assert {k.key_id for k in listed.keys} == {first.info.key_id, second.info.key_id}
        assert all(not k.disabled for k in listed.keys)

        await admin.security.set_api_key_disabled(first.info.key_id)
        with pytest.raises(tamto_sdk.errors.Unauthenticated, match="invalid API key"):
            await tamto_sdk.connect(tamto_cluster.url, api_key=first.api_key)
        await admin.security.set_api_key_disabled(first.info.key_id, False)
        async with tamto_sdk.connect(tamto_cluster.url, api_key=first.api_key) as client:
            assert (await client.security.whoami()).subject == identity

        rotated = await admin.security.rotate_api_key(second.info.key_id)
        assert rotated.info.identity == identity
        with pytest.raises(tamto_sdk.errors.Unauthenticated, match="invalid API key"):
            await tamto_sdk.connect(tamto_cluster.url, api_key=second.api_key)
        async with tamto_sdk.connect(tamto_cluster.url, api_key=rotated.api_key) as client:
            assert (await client.security.whoami()).subject == identity

        with pytest.raises(tamto_sdk.errors.AlreadyExists):
            await admin.security.create_identity(identity)
        with pytest.raises(tamto_sdk.errors.NotFound):
            await admin.security.create_api_key(unique("ghost"))
        with pytest.raises(tamto_sdk.errors.InvalidArgument, match="illegal name"):
            await admin.security.create_identity("Has Spaces")
        with pytest.raises(tamto_sdk.errors.NotFound):
            await admin.security.bind(identity, unique("no-such-role"))


async def test_whoami_and_roles_listing(tamto_cluster: TestCluster) -> None:
    role = unique("listed")
    async with await admin_client(tamto_cluster) as admin:
        me = await admin.security.whoami()
        assert me.subject == "dev"
        assert Grant(Permission.ADMIN, "*") in me.grants
        await admin.security.put_role(role, [Grant(Permission.CONSUME, "a.*")])
        assert await admin.security.bind("corp:alice", role)
        assert not await admin.security.bind("corp:alice", role)
        roles = {r.name: r for r in await admin.security.list_roles()}
        assert roles[role].grants == (Grant(Permission.CONSUME, "a.*"),)
        assert role in (await admin.security.list_bindings())["corp:alice"]
        assert await admin.security.delete_role(role)
        assert role not in (await admin.security.list_bindings()).get("corp:alice", ())
        assert not await admin.security.delete_role(role)
    async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        token = (await admin.security.token())[0]
        bad_role = auth_pb2.Role(name=role, grants=[auth_pb2.Grant(permission="root", pattern="*")])
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.PutRole(auth_pb2.PutRoleRequest(role=bad_role), metadata=bearer(token))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown permission 'root'" in (info.value.details() or "")
        bad_pattern = auth_pb2.Role(
            name=role, grants=[auth_pb2.Grant(permission="consume", pattern="a/b")]
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.PutRole(auth_pb2.PutRoleRequest(role=bad_pattern), metadata=bearer(token))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "illegal stream pattern 'a/b'" in (info.value.details() or "")


async def test_denials_logins_and_admin_actions_are_audited(
    tamto_cluster: TestCluster, stub: gateway_pb2_grpc.GatewayStub, nats_url: str
) -> None:
    bus = await nats.connect(nats_url)
    received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_audit(msg: Any) -> None:
        await received.put(json.loads(msg.data))

    await bus.subscribe("tamto.events.audit.*", cb=on_audit)
    await bus.flush()
    identity, stream = unique("audited"), unique("audited-stream")
    try:
        async with await admin_client(tamto_cluster) as admin:
            await admin.streams.ensure(stream)
            await admin.security.create_identity(identity)
            key = await admin.security.create_api_key(identity)
        async with tamto_sdk.connect(tamto_cluster.url, api_key=key.api_key) as client:
            token = (await client.security.token())[0]
        error = await attempt(stub, token, "publish", stream)
        assert error is not None

        seen: list[dict[str, Any]] = []

        async def denial_published() -> bool:
            while not received.empty():
                seen.append(received.get_nowait())
            return any(r["category"] == "denied" and r["actor"] == identity for r in seen)

        await eventually(denial_published, 5, "the denial on the bus")
    finally:
        await bus.close()

    def records(service: str) -> list[dict[str, Any]]:
        path = tamto_cluster.audit_file(service)
        return [json.loads(line) for line in path.read_text().splitlines()]

    denial = next(r for r in records("gateway") if r["actor"] == identity)
    assert denial["category"] == "denied"
    assert denial["action"] == "Publish"
    assert denial["target"] == f"stream {stream!r}"
    assert denial["outcome"] == "denied"
    assert denial["source"].startswith("ipv4:127.0.0.1:")
    assert denial["time"].endswith("+00:00")
    assert "lacks permission publish" in denial["detail"]
    assert denial == next(r for r in seen if r["actor"] == identity and r["category"] == "denied")

    auth_records = records("auth")
    create = next(
        r for r in auth_records if r["action"] == "identity.create" and identity in r["target"]
    )
    assert create["actor"] == "dev"
    assert create["category"] == "admin"
    assert create["source"].startswith("ipv4:127.0.0.1:")
    key_created = next(
        r for r in auth_records if r["action"] == "key.create" and identity in r["target"]
    )
    assert key_created["actor"] == "dev"
    login = next(r for r in auth_records if r["category"] == "login" and r["actor"] == identity)
    assert login["outcome"] == "ok"
    assert login["source"].startswith("ipv4:127.0.0.1:")  # the client, not the gateway
    stream_created = next(
        r for r in records("gateway") if r["action"] == "stream.create" and stream in r["target"]
    )
    assert stream_created["actor"] == "dev"


async def test_api_keys_never_in_logs_audit_or_etcd(
    tamto_cluster: TestCluster, etcd_endpoint: str
) -> None:
    identity = unique("secret")
    async with await admin_client(tamto_cluster) as admin:
        await admin.security.create_identity(identity)
        key = await admin.security.create_api_key(identity)
        rotated = await admin.security.rotate_api_key(key.info.key_id)
    async with tamto_sdk.connect(tamto_cluster.url, api_key=rotated.api_key):
        pass
    with pytest.raises(tamto_sdk.errors.Unauthenticated):
        await tamto_sdk.connect(tamto_cluster.url, api_key=key.api_key)
    secrets = [
        k.rsplit("_", 1)[1] for k in (key.api_key, rotated.api_key, tamto_cluster.credential)
    ]
    texts = [p.read_text(errors="replace") for p in (tamto_cluster.workdir / "logs").glob("*.log")]
    texts += [tamto_cluster.audit_file(s).read_text() for s in ("auth", "gateway")]
    assert any(rotated.info.key_id in t for t in texts)  # key ids are logged...
    for text in texts:
        for secret in secrets:
            assert secret not in text  # ...secrets never
    etcd: aetcd.Client = await connect_etcd(parse_endpoints(etcd_endpoint))
    try:
        dump = b"".join(kv.key + kv.value for kv in await etcd.get_prefix(b"/tamto/"))
    finally:
        await etcd.close()
    assert key.info.key_id.encode() in dump
    for secret in secrets:
        assert secret.encode() not in dump


def signing_key(cluster: TestCluster) -> tuple[str, Ed25519PrivateKey]:
    """The auth service's current signing key, read from its data directory."""
    pems = sorted(
        (cluster.workdir / "auth" / "auth" / "signing-keys").glob("*.pem"),
        key=lambda p: p.stat().st_mtime,
    )
    key = serialization.load_pem_private_key(pems[-1].read_bytes(), None)
    assert isinstance(key, Ed25519PrivateKey)
    return pems[-1].stem, key


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": "tamto", "aud": "tamto", "sub": "dev", "iat": now, "exp": now + 300}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def forged_tokens(cluster: TestCluster) -> dict[str, tuple[str, str]]:
    kid, key = signing_key(cluster)
    now = int(time.time())
    other = Ed25519PrivateKey.generate()

    def sign(body: dict[str, Any], with_key: Ed25519PrivateKey = key) -> str:
        return jwt.encode(body, with_key, algorithm="EdDSA", headers={"kid": kid})

    good = sign(claims())
    header, payload, _ = good.split(".")
    none_header = jwt.utils.base64url_encode(
        json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode()
    ).decode()
    return {
        "forged": (sign(claims(), other), "token signature invalid"),
        "tampered": (
            f"{header}.{jwt.utils.base64url_encode(json.dumps(claims(sub='x')).encode()).decode()}."
            f"{good.split('.')[2]}",
            "token signature invalid",
        ),
        "expired": (sign(claims(iat=now - 600, exp=now - 300)), "token expired"),
        "wrong-issuer": (sign(claims(iss="evil")), "token issuer not trusted"),
        "wrong-audience": (sign(claims(aud="elsewhere")), "token audience mismatch"),
        "alg-none": (f"{none_header}.{payload}.", "token algorithm not allowed"),
        "no-exp": (sign(claims(exp=None)), "token missing claim exp"),
        "garbage": ("not.a.token", "malformed token"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "forged",
        "tampered",
        "expired",
        "wrong-issuer",
        "wrong-audience",
        "alg-none",
        "no-exp",
        "garbage",
    ],
)
async def test_bad_tokens_are_unauthenticated(
    tamto_cluster: TestCluster, stub: gateway_pb2_grpc.GatewayStub, case: str
) -> None:
    # The same key, claims and call succeed when nothing is wrong: only `case` differs.
    kid, key = signing_key(tamto_cluster)
    good = jwt.encode(claims(), key, algorithm="EdDSA", headers={"kid": kid})
    await stub.ListStreams(gateway_pb2.ListStreamsRequest(), metadata=bearer(good))
    token, message = forged_tokens(tamto_cluster)[case]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ListStreams(gateway_pb2.ListStreamsRequest(), metadata=bearer(token))
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert info.value.details() == message


# -- Revocation of API keys ----------------------

#: The promise is 2 s (measured 0.02-0.05 s); the time includes the admin RPC and two
#: publishes per poll, which a loaded 2-core CI machine can hold for seconds, so CI
#: asserts 5 s (still far below the 30 s policy reload that applies a change without
#: the announcement) and TAMTO_LONG_TESTS=1 the promised 2 s.
REVOKED_WITHIN_S = 2.0 if long_tests_enabled() else 5.0


async def test_a_disabled_rotated_or_deleted_api_keys_tokens_are_refused_within_2s(
    tamto_cluster: TestCluster, stub: gateway_pb2_grpc.GatewayStub
) -> None:
    """Tokens name the key they were minted from; a key disabled, rotated or deleted
    stops its live tokens within 2 s (it used to be up to their 15-minute lifetime)
    on every gateway (two here), each refusal audited, while a key created after
    the gateway's last policy read works at once."""
    identity, role, stream = unique("revoked"), unique("revoked-role"), unique("revoked-stream")
    second_url = await asyncio.to_thread(tamto_cluster.start_gateway)
    channel = grpc.aio.insecure_channel(second_url.removeprefix("tamto://"))
    stubs = [stub, gateway_pb2_grpc.GatewayStub(channel)]
    async with await admin_client(tamto_cluster) as admin:
        await admin.streams.ensure(stream)
        await admin.security.create_identity(identity)
        await admin.security.put_role(role, [Grant(Permission.PUBLISH, stream)])
        await admin.security.bind(identity, role)
        keys = [await admin.security.create_api_key(identity) for _ in range(3)]
        tokens = []
        for key in keys:
            async with tamto_sdk.connect(tamto_cluster.url, api_key=key.api_key) as client:
                tokens.append((await client.security.token())[0])
        for token in tokens:
            assert await attempt(stub, token, "publish", stream) is None
        disabled, rotated, deleted = (k.info.key_id for k in keys)

        began = time.monotonic()
        await admin.security.set_api_key_disabled(disabled)
        await refused_on_every_gateway(stubs, tokens[0], disabled, stream)
        assert time.monotonic() - began < REVOKED_WITHIN_S
        error = await attempt(stub, tokens[0], "publish", stream)
        assert error is not None
        assert error.details() == f"API key {disabled} of this token is disabled or deleted"
        assert await attempt(stub, tokens[1], "publish", stream) is None, "other keys unaffected"

        began = time.monotonic()
        new = await admin.security.rotate_api_key(rotated)
        await refused_on_every_gateway(stubs, tokens[1], rotated, stream)
        assert time.monotonic() - began < REVOKED_WITHIN_S
        async with tamto_sdk.connect(tamto_cluster.url, api_key=new.api_key) as client:
            fresh = (await client.security.token())[0]
        assert await attempt(stub, fresh, "publish", stream) is None, "the new key's token works"

        await check_a_deleted_key(tamto_cluster, admin, stubs, identity, keys[2], tokens[2], stream)
        async with tamto_sdk.connect(tamto_cluster.url, api_key=new.api_key) as client:
            with pytest.raises(tamto_sdk.errors.PermissionDenied):
                await client.security.delete_api_key(new.info.key_id)

        await admin.security.set_api_key_disabled(disabled, False)
        for gateway in stubs:
            await eventually(
                functools.partial(_allowed, gateway, tokens[0], stream),
                10.0,
                "a re-enabled key's token to work",
            )
    await channel.close()
    check_revocations_audited(tamto_cluster, identity, disabled, rotated, deleted)


async def refused_on_every_gateway(
    stubs: list[gateway_pb2_grpc.GatewayStub], token: str, key_id: str, stream: str
) -> None:
    """Wait until every gateway refuses `token` (of key `key_id`) as unauthenticated."""

    async def refused() -> bool:
        for gateway in stubs:
            error = await attempt(gateway, token, "publish", stream)
            if error is None or error.code() != grpc.StatusCode.UNAUTHENTICATED:
                return False
        return True

    # 10 s to wait, so a loaded machine reports the time the caller measures.
    await eventually(refused, 10.0, f"key {key_id}'s token to be refused")


async def check_a_deleted_key(
    cluster: TestCluster,
    admin: tamto_sdk.Client,
    stubs: list[gateway_pb2_grpc.GatewayStub],
    identity: str,
    key: NewApiKey,
    token: str,
    stream: str,
) -> None:
    """Deleting `key` (of `identity`) refuses its live `token` within 2 s and the key itself; it is no
    longer listed, and deleting it again is NotFound."""
    deleted = key.info.key_id
    began = time.monotonic()
    gone = await admin.security.delete_api_key(deleted)
    await refused_on_every_gateway(stubs, token, deleted, stream)
    assert time.monotonic() - began < REVOKED_WITHIN_S
    assert (gone.key_id, gone.identity) == (deleted, identity)
    with pytest.raises(tamto_sdk.errors.Unauthenticated, match="invalid API key"):
        await tamto_sdk.connect(cluster.url, api_key=key.api_key)
    listed = {i.name: i for i in await admin.security.list_identities()}[identity]
    assert deleted not in {k.key_id for k in listed.keys}
    with pytest.raises(tamto_sdk.errors.NotFound, match=f"no API key with id {deleted}"):
        await admin.security.delete_api_key(deleted)


def check_revocations_audited(
    cluster: TestCluster, identity: str, disabled: str, rotated: str, deleted: str
) -> None:
    """Each refusal of a revoked key's token is in the gateways' audit, the deletion in
    the auth service's."""
    denials = [
        json.loads(line)
        for line in cluster.audit_file("gateway").read_text().splitlines()
        if "of this token is disabled or deleted" in line
    ]  # both gateways append to the one audit file of the cluster's gateway data dir
    assert {d["detail"].split()[2] for d in denials} >= {disabled, rotated, deleted}
    assert all(d["outcome"] == "unauthenticated" for d in denials)
    deletions = [
        record
        for line in cluster.audit_file("auth").read_text().splitlines()
        if (record := json.loads(line))["action"] == "key.delete" and deleted in record["target"]
    ]
    assert [(d["actor"], d["target"], d["outcome"]) for d in deletions] == [
        ("dev", f"key {deleted} of {identity}", "ok")
    ]


async def _allowed(stub: gateway_pb2_grpc.GatewayStub, token: str, stream: str) -> bool:
    return await attempt(stub, token, "publish", stream) is None


async def test_signing_key_rotation_keeps_old_tokens_and_serves_new_ones(
    fresh_cluster: TestCluster,
) -> None:
    async with await admin_client(fresh_cluster) as admin:
        old_token = (await admin.security.token())[0]
        old_kid = jwt.get_unverified_header(old_token)["kid"]
        new_kid = await admin.security.rotate_signing_key()
        assert new_kid != old_kid
        async with await admin_client(fresh_cluster) as fresh:
            new_token = (await fresh.security.token())[0]
            assert jwt.get_unverified_header(new_token)["kid"] == new_kid
            assert (await fresh.security.whoami()).subject == "dev"  # verified at once
    async with grpc.aio.insecure_channel(fresh_cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        await stub.ListStreams(gateway_pb2.ListStreamsRequest(), metadata=bearer(old_token))
    pems = {p.stem for p in (fresh_cluster.workdir / "auth/auth/signing-keys").glob("*.pem")}
    assert pems == {old_kid, new_kid}
