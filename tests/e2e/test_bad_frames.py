"""Bytes that do not parse as their request are refused alone with INVALID_ARGUMENT
naming the field, on every RPC of every server a client's bytes can reach (gateway,
router, storage, auth). On a stream of pipelined calls the bad frame's call is
answered and every other call on the stream too; a consume stream, one call, ends
with that status (docs/validation.md, Requests that do not parse)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor, ServiceDescriptor
from google.protobuf.message import Message

import tamto_sdk
from tamto_protocol.v1 import (
    auth_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    messages_pb2,
    router_pb2,
    storage_pb2,
)
from tamto_testing.cluster import TestCluster
from tamto_testing.oversized_batches import one_message
from tests.e2e.gateway_calls import auth_metadata

pytestmark = pytest.mark.e2e

#: Bytes protobuf refuses whatever the message type: a length running past the end.
TRUNCATED = b"\x0a\x05ab"
#: The marker a string field is set to, then replaced by bytes that are not UTF-8.
MARK = "zq7zq7"
NOT_UTF8 = b"\xff\xfe\xfd\xfc\xfb\xfa"


def not_utf8(message: Message) -> bytes:
    """`message` (one string field holding `MARK`) with that string's bytes not UTF-8."""
    data = message.SerializeToString()
    assert data.count(MARK.encode()) == 1
    return data.replace(MARK.encode(), NOT_UTF8)


def mutations(valid: bytes, parse: Callable[[bytes], Any], rng: random.Random) -> list[bytes]:
    """Malformed variants of `valid` that `parse` refuses: cut short at random points,
    and an invalid wire type (7) or a group (3) put in front or at the end."""
    cuts = {rng.randrange(1, len(valid)) for _ in range(4)}
    variants = [valid[:cut] for cut in sorted(cuts)]
    variants += [b"\x0f" + valid, valid + b"\x7b", b"\x0b" + valid]
    return [v for v in variants if not _parses(parse, v)]


def _parses(parse: Callable[[bytes], Any], data: bytes) -> bool:
    try:
        parse(data)
    except Exception:
        return False
    return True


# -- unary calls ------------------------------------------------------------------


def unary_methods(service: ServiceDescriptor) -> list[str]:
    """The methods taking one request (answering one response or a stream)."""
    return [f"/{service.full_name}/{m.name}" for m in service.methods if not m.client_streaming]


def first_string_field(descriptor: Any) -> FieldDescriptor | None:
    return next(
        (
            f
            for f in descriptor.fields
            if f.type == FieldDescriptor.TYPE_STRING and not f.is_repeated
        ),
        None,
    )


async def refused_unary(
    channel: grpc.aio.Channel, method: str, data: bytes, streaming: bool = False
) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _call(channel, method, data, streaming)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, raised.value)
    return raised.value.details() or ""


async def _call(channel: grpc.aio.Channel, method: str, data: bytes, streaming: bool) -> None:
    if not streaming:
        unary = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        await unary(data, timeout=10)
        return
    call = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
    async for _ in call(data, timeout=10):
        pass


SERVERS = {
    "gateway": gateway_pb2.DESCRIPTOR.services_by_name["Gateway"],
    "router": router_pb2.DESCRIPTOR.services_by_name["Router"],
    "storage": storage_pb2.DESCRIPTOR.services_by_name["Storage"],
    "auth": auth_pb2.DESCRIPTOR.services_by_name["Auth"],
}


@pytest.mark.parametrize("server", sorted(SERVERS))
async def test_every_unary_call_refuses_bytes_that_do_not_parse(
    tamto_cluster: TestCluster, server: str
) -> None:
    service = SERVERS[server]
    async with grpc.aio.insecure_channel(tamto_cluster.address(server)) as channel:
        for method in unary_methods(service):
            described = service.methods_by_name[method.rsplit("/", 1)[1]]
            streaming = described.server_streaming
            details = await refused_unary(channel, method, TRUNCATED, streaming)
            assert "malformed tamto.v1." in details, (method, details)
            assert "truncated" in details, (method, details)
            field = first_string_field(described.input_type)
            if field is None:
                continue
            request = _message_class(described.input_type)(**{field.name: MARK})
            details = await refused_unary(channel, method, not_utf8(request), streaming)
            assert f"field {field.name!r} is not valid UTF-8" in details, (method, details)


def _message_class(descriptor: Any) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


# -- pipelined streams ------------------------------------------------------------


async def pipelined(
    channel: grpc.aio.Channel,
    method: str,
    response_type: Any,
    frames: Sequence[tuple[int, bytes]],
    metadata: Sequence[tuple[str, str]] = (),
) -> dict[int, list[Any]]:
    """Send `frames` (call_id, bytes) on one stream, half-close, and collect every
    answer by call_id until the server ends the stream (which must be OK)."""
    stream = channel.stream_stream(
        method, request_serializer=None, response_deserializer=response_type.FromString
    )
    call = stream(metadata=list(metadata), timeout=30)
    for _, data in frames:
        await call.write(data)
    await call.done_writing()
    answers: dict[int, list[Any]] = {}
    async for answer in call:
        answers.setdefault(answer.call_id, []).append(answer)
    assert await call.code() == grpc.StatusCode.OK, (method, await call.details())
    return answers


def interleaved(
    valid: Callable[[int], Message], bad: Callable[[int], list[bytes]], rounds: int
) -> tuple[list[tuple[int, bytes]], set[int], set[int]]:
    """Valid calls with malformed frames between them: the frames, the valid call
    ids, and the ids of the malformed frames whose call_id is still readable."""
    frames: list[tuple[int, bytes]] = []
    good, named = set(), set()
    call_id = 1
    for _ in range(rounds):
        frames.append((call_id, valid(call_id).SerializeToString()))
        good.add(call_id)
        call_id += 1
        named_bad = bad(call_id)
        frames.append((call_id, named_bad[0]))
        named.add(call_id)
        call_id += 1
        frames.extend((0, data) for data in named_bad[1:])
    frames.append((call_id, valid(call_id).SerializeToString()))
    good.add(call_id)
    return frames, good, named


def check_answers(
    answers: dict[int, list[Any]], good: set[int], named: set[int], bad_frames: int
) -> None:
    for call_id in good:
        answered = {i: len(a) for i, a in sorted(answers.items())}
        assert len(answers.get(call_id, [])) == 1, f"call {call_id}: answered {answered}"
    for call_id in named:
        (answer,) = answers[call_id]
        assert answer.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "is not valid UTF-8" in answer.status.message, answer.status.message
    # Frames whose call_id could not be read are answered with call_id 0, one each.
    unnamed = answers.get(0, [])
    assert len(unnamed) == bad_frames
    for answer in unnamed:
        assert answer.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert answer.status.message.startswith("malformed tamto.v1.")


async def token_metadata(tamto_cluster: TestCluster) -> list[tuple[str, str]]:
    async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
        return await auth_metadata(gateway_pb2_grpc.GatewayStub(channel), tamto_cluster.credential)


def batch() -> messages_pb2.RecordBatch:
    return messages_pb2.RecordBatch(arrow_ipc=one_message(payload=b"ok"), count=1)


def pipelined_cases(stream: str) -> dict[str, tuple[str, Any, Callable[..., Message]]]:
    """Every pipelined stream method: (server, response type, request builder taking
    the call_id and the value of its first string field)."""
    ref = storage_pb2.PartitionRef
    return {
        "/tamto.v1.Gateway/PublishStream": (
            "gateway",
            gateway_pb2.PublishStreamResponse,
            lambda i, s=stream: gateway_pb2.PublishRequest(
                stream=s, partition=0, batch=batch(), call_id=i
            ),
        ),
        "/tamto.v1.Gateway/PublishEphemeralStream": (
            "gateway",
            gateway_pb2.PublishEphemeralStreamResponse,
            lambda i, s=stream: gateway_pb2.PublishEphemeralRequest(
                stream=s, topic="t", batch=batch(), call_id=i
            ),
        ),
        "/tamto.v1.Gateway/RequestStream": (
            "gateway",
            gateway_pb2.RequestStreamResponse,
            lambda i, s=stream: gateway_pb2.RequestRequest(
                stream=s, topic="t", batch=batch(), timeout_ms=1, call_id=i
            ),
        ),
        "/tamto.v1.Gateway/ReplyStream": (
            "gateway",
            gateway_pb2.ReplyStreamResponse,
            lambda i, s=stream: gateway_pb2.ReplyRequest(
                response_stream=s, batch=batch(), call_id=i
            ),
        ),
        "/tamto.v1.Router/PublishStream": (
            "router",
            gateway_pb2.PublishStreamResponse,
            lambda i, s=stream: gateway_pb2.PublishRequest(
                stream=s, partition=0, batch=batch(), call_id=i
            ),
        ),
        "/tamto.v1.Router/AppendStream": (
            "router",
            router_pb2.RouterAppendStreamResponse,
            lambda i, s=stream: router_pb2.RouterAppendRequest(
                stream=s, partition=0, batch=batch(), call_id=i
            ),
        ),
        "/tamto.v1.Storage/AppendStream": (
            "storage",
            storage_pb2.StorageAppendStreamResponse,
            lambda i, s=stream: storage_pb2.StorageAppendRequest(
                partition=ref(stream=s, partition=0), epoch=1, call_id=i
            ),
        ),
    }


def test_the_cases_cover_every_pipelined_stream() -> None:
    streams = {
        f"/{service.full_name}/{m.name}"
        for service in SERVERS.values()
        for m in service.methods
        if m.client_streaming and "call_id" in m.input_type.fields_by_name
    }
    assert streams == set(pipelined_cases("s"))


@pytest.mark.parametrize("method", sorted(pipelined_cases("s")))
async def test_bad_frames_on_a_pipelined_stream_are_refused_alone(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client, method: str
) -> None:
    stream = f"frames-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    server, response_type, build = pipelined_cases(stream)[method]
    rng = random.Random(method)
    unnamed = 0

    def bad(call_id: int) -> list[bytes]:
        """A frame whose call_id can be read, then some whose call_id cannot."""
        nonlocal unnamed
        without_id = build(0)
        variants = mutations(without_id.SerializeToString(), without_id.FromString, rng)
        unnamed += len(variants)
        return [not_utf8(_with_mark(build(call_id))), *variants]

    frames, good, named = interleaved(build, bad, rounds=5)
    # Fields of the wrong type parse (protobuf keeps them as unknown fields): such a
    # call is answered once, as its handler judges the fields it lacks.
    odd = set(range(len(frames) + 100, len(frames) + 103))
    frames[3:3] = [(i, wrong_type(build(i))) for i in sorted(odd)]
    metadata = await token_metadata(tamto_cluster)
    async with grpc.aio.insecure_channel(tamto_cluster.address(server)) as channel:
        answers = await pipelined(channel, method, response_type, frames, metadata)
    check_answers(answers, good | odd, named, unnamed)
    if method == "/tamto.v1.Gateway/PublishStream":  # the valid calls were stored
        assert all(answers[i][0].status.code == 0 for i in good)


def wrong_type(message: Message) -> bytes:
    """`message` with its field 1 sent as a varint (whatever its type is)."""
    message.ClearField(message.DESCRIPTOR.fields_by_number[1].name)
    return b"\x08\x2a" + message.SerializeToString()


def _with_mark(message: Message) -> Message:
    """`message` with its first string field (somewhere inside) set to `MARK`."""
    for field in message.DESCRIPTOR.fields:
        if field.type == FieldDescriptor.TYPE_STRING and field.name != "topic":
            setattr(message, field.name, MARK)
            return message
        if field.message_type is not None and not field.is_repeated:
            inner = getattr(message, field.name)
            if first_string_field(inner.DESCRIPTOR) is not None:
                setattr(inner, first_string_field(inner.DESCRIPTOR).name, MARK)  # type: ignore[union-attr]
                return message
    raise AssertionError(f"no string field in {message.DESCRIPTOR.full_name}")


# -- consume streams --------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "method"),
    [("gateway", "/tamto.v1.Gateway/Consume"), ("router", "/tamto.v1.Router/Consume")],
)
async def test_a_bad_frame_ends_a_consume_stream_with_invalid_argument(
    tamto_cluster: TestCluster, server: str, method: str
) -> None:
    subscribe = messages_pb2.ConsumeRequest(
        subscribe=messages_pb2.Subscribe(stream="s", subscription=MARK)
    )
    metadata = await token_metadata(tamto_cluster)
    async with grpc.aio.insecure_channel(tamto_cluster.address(server)) as channel:
        for frame in (not_utf8(subscribe), TRUNCATED):
            call = channel.stream_stream(
                method,
                request_serializer=None,
                response_deserializer=messages_pb2.ConsumeResponse.FromString,
            )(metadata=metadata, timeout=20)
            await call.write(frame)
            with contextlib.suppress(grpc.aio.AioRpcError):
                async for response in call:  # an in-band error first, then the status
                    assert response.WhichOneof("response") == "error"
                    await call.done_writing()
            assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "malformed tamto.v1.ConsumeRequest" in (await call.details() or "")


async def test_a_bad_frame_after_the_subscribe_ends_the_consume_stream_in_band(
    tamto_cluster: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    stream = f"consumed-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    subscribe = messages_pb2.ConsumeRequest(
        subscribe=messages_pb2.Subscribe(stream=stream, subscription="s")
    )
    credit = messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=10))
    # An ack whose ranges run past the end of its frame.
    ack = messages_pb2.ConsumeRequest(
        ack=messages_pb2.PartitionAcks(ranges=[messages_pb2.OffsetRange(first=0, last=5)])
    ).SerializeToString()
    metadata = await token_metadata(tamto_cluster)
    async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
        raw = channel.stream_stream(
            "/tamto.v1.Gateway/Consume",
            request_serializer=None,
            response_deserializer=messages_pb2.ConsumeResponse.FromString,
        )(metadata=metadata, timeout=20)
        await raw.write(subscribe.SerializeToString())
        await raw.write(credit.SerializeToString())
        await raw.write(ack[:-1])
        response = await raw.read()
        assert response.WhichOneof("response") == "error"
        assert response.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "ConsumeRequest: the bytes end or break inside field 'ack'" in response.error.message
        await raw.done_writing()
        assert await raw.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_bad_frame_ends_a_consume_mux_with_invalid_argument(
    tamto_cluster: TestCluster,
) -> None:
    async with grpc.aio.insecure_channel(tamto_cluster.address("router")) as channel:
        call = channel.stream_stream(
            "/tamto.v1.Router/ConsumeMux", request_serializer=None, response_deserializer=None
        )(timeout=20)
        await call.write(TRUNCATED)
        await call.done_writing()
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for _ in call:
                pass
        assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed tamto.v1.ConsumeMuxRequests" in (await call.details() or "")


async def test_the_servers_serve_on_after_the_bad_frames(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = f"after-{uuid.uuid4().hex[:8]}"
    await tamto_client.streams.ensure(stream, partitions=1)
    async with tamto_client.producer(stream) as producer:
        await asyncio.wait_for(producer.send_and_wait(b"after"), 10)
