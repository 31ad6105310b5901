"""Property-based fuzzing of every gateway RPC against the real services.

Each property sends hypothesis-generated requests (`tests.fuzz`: any message of
the RPC's request type, Arrow buffers from a corpus of valid and crafted
batches, mutated) and asserts:

- every answer is OK or a precise, non-retryable error: a status among
  `PRECISE`, with details (never UNKNOWN, INTERNAL, UNAVAILABLE, DATA_LOSS...);
- nothing invalid is stored: a consumer of the fuzzed streams decodes every
  stored batch in full (the SDK raises `UndecodableBatch` otherwise) and
  receives only payloads of publishes that were acknowledged;
- the services keep serving: afterwards every member is healthy and a plain
  publish and consume work.

CI runs a short, derandomized campaign; TAMTO_LONG_TESTS=1 a long random one
(docs/testing.md, Fuzzing).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from hypothesis import given
from hypothesis import strategies as st

import tamto_sdk
from tamto_protocol.batch import BatchFormatError, validate_batch
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_testing.cluster import TestCluster
from tests.e2e.members import own_members
from tests.fuzz import LONG, NAMES, arrow_buffers, fuzz_settings, requests

#: A long campaign outlasts pytest-timeout's default 300 s per test.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(7200 if LONG else 300)]

Code = grpc.StatusCode
#: Answers that are precise and say retrying the same request will not help.
PRECISE = {
    Code.OK,
    Code.INVALID_ARGUMENT,
    Code.OUT_OF_RANGE,
    Code.NOT_FOUND,
    Code.ALREADY_EXISTS,
    Code.FAILED_PRECONDITION,
    Code.PERMISSION_DENIED,
    Code.UNAUTHENTICATED,
    Code.RESOURCE_EXHAUSTED,
    Code.UNIMPLEMENTED,
}
SERVICE = gateway_pb2.DESCRIPTOR.services_by_name["Gateway"]
#: RotateSigningKey changes the whole cluster's signing keys (test_security covers it).
NOT_FUZZED = {"RotateSigningKey"}
UNARY = [
    m
    for m in SERVICE.methods
    if not m.client_streaming and not m.server_streaming and m.name not in NOT_FUZZED
]
#: Requests that could delete or replace what the other properties use get no known names.
NO_KNOWN_NAMES = {"DeleteStream"}
#: The stream pipelined publishes go to (not checked by the consumer of `NAMES`).
PIPELINED = ["fuzz-pipelined"]


@dataclass
class Gateway:
    """A plain gRPC channel to the cluster's gateway, with a token."""

    channel: grpc.Channel
    token: str
    acked_payloads: set[bytes] = field(default_factory=set)

    def metadata(self, auth: str) -> list[tuple[str, str]]:
        if auth == "none":
            return []
        token = self.token if auth == "token" else "not-a-token"
        return [("authorization", f"Bearer {token}")]

    def unary(self, method: MethodDescriptor, request: Any, auth: str = "token") -> Any:
        """Call `method`; returns the response, or the `grpc.RpcError` it ended with."""
        call = self.channel.unary_unary(
            f"/{SERVICE.full_name}/{method.name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=lambda b: b,
        )
        try:
            answer = call(request, metadata=self.metadata(auth), timeout=20)
        except grpc.RpcError as exc:
            return exc
        if method.name == "Publish":
            self.record_acked(request.batch)
        return answer

    def record_acked(self, batch: Any) -> None:
        """Note the payloads of an acknowledged publish, which must be a valid batch."""
        try:
            accepted = validate_batch(batch.arrow_ipc, batch.count, 0)
        except BatchFormatError as exc:
            raise AssertionError(f"the gateway acknowledged an invalid batch: {exc}") from None
        self.acked_payloads.update(accepted.column("payload").to_pylist())


#: How often each status answered, per RPC (printed with -s, for judging the campaign).
SEEN: dict[str, dict[str, int]] = {}


def assert_precise(answer: Any, what: str) -> None:
    rpc = what.split("(", 1)[0]
    code = answer.code() if isinstance(answer, grpc.RpcError) else Code.OK
    SEEN.setdefault(rpc, {}).setdefault(code.name, 0)
    SEEN[rpc][code.name] += 1
    if not isinstance(answer, grpc.RpcError):
        return
    details = answer.details()
    assert code in PRECISE, f"{what}: answered {code.name}: {details}"
    assert details, f"{what}: {code.name} without details"


@pytest.fixture(scope="module")
def gateway(tamto_cluster: TestCluster) -> Iterator[Gateway]:
    channel = grpc.insecure_channel(tamto_cluster.gateway_address)
    auth = SERVICE.methods_by_name["Authenticate"]
    answer = Gateway(channel, "").unary(
        auth, gateway_pb2.AuthenticateRequest(api_key=tamto_cluster.credential), "none"
    )
    token = gateway_pb2.AuthenticateResponse.FromString(answer).token
    gw = Gateway(channel, token)
    ensure = SERVICE.methods_by_name["EnsureStream"]
    for name in [*NAMES, *PIPELINED]:
        config = messages_pb2.StreamConfig(partitions=2)
        created = gw.unary(ensure, gateway_pb2.EnsureStreamRequest(name=name, config=config))
        assert not isinstance(created, grpc.RpcError), created
    try:
        yield gw
    finally:
        channel.close()


def assert_serving(cluster: TestCluster) -> None:
    """Every member healthy, and a plain publish and consume work."""

    async def check() -> None:
        members = await own_members(cluster)
        assert set(members) >= {"gateway", "router", "storage", "auth"}, members
        stream = f"after-fuzz-{uuid.uuid4().hex[:8]}"
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            await client.streams.ensure(stream, partitions=1)
            async with client.producer(stream) as producer:
                await (await producer.send(b"still serving"))
            async with client.consumer(stream, "s") as consumer:
                batch = await consumer.receive_batch(timeout_s=10)
                assert [m.payload for m in batch] == [b"still serving"]

    asyncio.run(check())


def test_every_unary_rpc_answers_ok_or_a_precise_error(
    tamto_cluster: TestCluster, gateway: Gateway
) -> None:
    @fuzz_settings(ci_examples=200, long_examples=10_000)
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        method = data.draw(st.sampled_from(UNARY), label="method")
        names = [] if method.name in NO_KNOWN_NAMES else NAMES
        request = data.draw(requests(method.input_type, names), label="request")
        auth = data.draw(st.sampled_from(["token", "token", "token", "none", "garbage"]))
        assert_precise(gateway.unary(method, request, auth), f"{method.name}({request})")

    fuzz()
    print(SEEN)
    assert_serving(tamto_cluster)


def test_publish_of_fuzzed_batches_stores_nothing_invalid(
    tamto_cluster: TestCluster, gateway: Gateway
) -> None:
    publish = SERVICE.methods_by_name["Publish"]

    @fuzz_settings(ci_examples=200, long_examples=10_000)
    @given(
        stream=st.sampled_from(NAMES) | st.text(max_size=12),
        partition=st.sampled_from([0, 1]) | st.integers(0, 2**32 - 1),
        data=arrow_buffers(),
        count=st.sampled_from([1, 3, 37]) | st.integers(0, 2**31),
    )
    def fuzz(stream: str, partition: int, data: bytes, count: int) -> None:
        request = gateway_pb2.PublishRequest(
            stream=stream,
            partition=partition,
            batch=messages_pb2.RecordBatch(arrow_ipc=data, count=count),
        )
        answer = gateway.unary(publish, request)  # notes what was acknowledged
        assert_precise(answer, f"Publish({stream!r}, {partition}, {len(data)} bytes, {count})")

    fuzz()

    async def consume_everything() -> int:
        got = 0
        async with tamto_sdk.connect(tamto_cluster.url, api_key=tamto_cluster.credential) as client:
            for stream in NAMES:
                async with client.consumer(stream, f"check-{uuid.uuid4().hex[:6]}") as consumer:
                    while True:
                        # UndecodableBatch here would mean something invalid was stored.
                        batch = await consumer.receive_batch(timeout_s=2)
                        if not len(batch):
                            break
                        for message in batch:
                            assert message.payload in gateway.acked_payloads, message
                        got += len(batch)
                        consumer.ack(batch)
        return got

    assert gateway.acked_payloads, "no fuzzed publish was valid: the campaign tested only refusals"
    assert asyncio.run(consume_everything()) > 0
    assert_serving(tamto_cluster)


def test_consume_streams_of_fuzzed_requests_end_precisely(
    tamto_cluster: TestCluster, gateway: Gateway
) -> None:
    consume = gateway.channel.stream_stream(
        f"/{SERVICE.full_name}/Consume",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=lambda b: b,
    )
    request = requests(messages_pb2.ConsumeRequest.DESCRIPTOR)
    subscribe = st.builds(
        lambda stream, sub, kind: messages_pb2.ConsumeRequest(
            subscribe=messages_pb2.Subscribe(stream=stream, subscription=sub, type=kind)
        ),
        st.sampled_from(NAMES),
        st.sampled_from(["s1", "s2"]) | st.text(max_size=8),
        st.integers(0, 5),
    )

    @fuzz_settings(ci_examples=15, long_examples=1_000)
    @given(first=subscribe | request, rest=st.lists(request, max_size=5))
    def fuzz(first: Any, rest: list[Any]) -> None:
        responses = consume(iter([first, *rest]), metadata=gateway.metadata("token"), timeout=1)
        try:
            for _ in responses:
                pass
        except grpc.RpcError as exc:
            if exc.code() != Code.DEADLINE_EXCEEDED:
                assert_precise(exc, f"Consume({[first, *rest]})")

    fuzz()
    assert_serving(tamto_cluster)


#: A status code by its number (`CallStatus.code` of a pipelined call's answer).
_BY_NUMBER = {code.value[0]: code for code in Code}


def test_publish_stream_calls_and_ephemeral_subscriptions_end_precisely(
    tamto_cluster: TestCluster, gateway: Gateway
) -> None:
    publish_stream = gateway.channel.stream_stream(
        f"/{SERVICE.full_name}/PublishStream",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=gateway_pb2.PublishStreamResponse.FromString,
    )
    subscribe = gateway.channel.unary_stream(
        f"/{SERVICE.full_name}/SubscribeEphemeral",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=lambda b: b,
    )
    publish_request = requests(gateway_pb2.PublishRequest.DESCRIPTOR, PIPELINED)
    subscribe_request = requests(gateway_pb2.SubscribeEphemeralRequest.DESCRIPTOR, PIPELINED)

    @fuzz_settings(ci_examples=20, long_examples=1_000)
    @given(calls=st.lists(publish_request, min_size=1, max_size=5), sub=subscribe_request)
    def fuzz(calls: list[Any], sub: Any) -> None:
        what = f"PublishStream({calls})"
        try:
            for answer in publish_stream(
                iter(calls), metadata=gateway.metadata("token"), timeout=10
            ):
                code = _BY_NUMBER.get(answer.status.code, Code.UNKNOWN)
                assert code in PRECISE, f"{what}: call {answer.call_id} answered {code.name}"
                if code is not Code.OK:
                    assert answer.status.message, f"{what}: {code.name} without a message"
        except grpc.RpcError as exc:
            assert_precise(exc, what)
        try:
            for _ in subscribe(sub, metadata=gateway.metadata("token"), timeout=0.5):
                pass
        except grpc.RpcError as exc:
            if exc.code() != Code.DEADLINE_EXCEEDED:  # still subscribed: fine
                assert_precise(exc, f"SubscribeEphemeral({sub})")

    fuzz()
    assert_serving(tamto_cluster)
