"""The consume-path wire encoder writes what the generated classes would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tamto_protocol.delivery_wire import (
    MuxResponse,
    WireError,
    consume_delivery,
    mux_end,
    mux_responses,
    parse_consume_response,
    parse_mux_response,
    parse_mux_responses,
    raw_responses,
)
from tamto_protocol.v1 import messages_pb2, router_pb2
from tamto_testing.grpc_servers import listen


@pytest.mark.parametrize(
    ("stream", "partition", "base", "count", "time_us", "data", "delivered", "offsets"),
    [
        ("s", 0, 0, 0, 0, b"", 0, ()),
        ("orders", 3, 1_000_000, 2, 1_700_000_000_000_000, b"\x00\xffarrow", 1, ()),
        ("x" * 300, 1 << 31, (1 << 62) + 5, 1 << 20, 1, b"a" * 200_000, 7, (5, 9, 1 << 40)),
        ("", 5, 0, 0, 0, b"", 2, (0, 1)),
    ],
)
def test_matches_serialize_to_string(
    stream: str,
    partition: int,
    base: int,
    count: int,
    time_us: int,
    data: bytes,
    delivered: int,
    offsets: tuple[int, ...],
) -> None:
    generated = messages_pb2.ConsumeResponse(
        delivery=messages_pb2.Delivery(
            stream=stream,
            partition=partition,
            batch=messages_pb2.StoredBatch(
                base_offset=base, count=count, publish_time_us=time_us, arrow_ipc=data
            ),
            delivery_count=delivered,
            offsets=offsets,
        )
    )
    encoded = consume_delivery(stream, partition, base, count, time_us, data, delivered, offsets)
    assert encoded == generated.SerializeToString()
    assert messages_pb2.ConsumeResponse.FromString(encoded) == generated
    for session in (1, 1 << 40):  # wrapped for a consume mux, and read back
        muxed = consume_delivery(
            stream, partition, base, count, time_us, data, delivered, offsets, session
        )
        wrapped = router_pb2.ConsumeMuxResponse(session=session, consume=encoded)
        assert muxed == wrapped.SerializeToString()
        assert parse_mux_response(muxed) == MuxResponse(session, encoded, None)


@pytest.mark.parametrize(("code", "message"), [(0, ""), (3, "bad ack"), (14, "é" * 300)])
def test_mux_end_matches_serialize_to_string(code: int, message: str) -> None:
    generated = router_pb2.ConsumeMuxResponse(
        session=9, end=messages_pb2.CallStatus(code=code, message=message)
    )
    assert mux_end(9, code, message) == generated.SerializeToString()
    assert parse_mux_response(generated.SerializeToString()) == MuxResponse(
        9, None, (code, message)
    )
    with pytest.raises(WireError):
        parse_mux_response(router_pb2.ConsumeMuxResponse(session=9).SerializeToString())


def test_mux_responses_match_serialize_to_string_and_parse_in_order() -> None:
    ended = mux_end(3, 14, "gone")
    delivered = consume_delivery("s", 1, 5, 1, 0, b"arrow", 1, (), 4)
    generated = router_pb2.ConsumeMuxResponses(
        responses=[
            router_pb2.ConsumeMuxResponse.FromString(ended),
            router_pb2.ConsumeMuxResponse.FromString(delivered),
        ]
    )
    assert mux_responses([ended, delivered]) == generated.SerializeToString()
    assert [(r.session, r.end) for r in parse_mux_responses(mux_responses([ended, delivered]))] == [
        (3, (14, "gone")),
        (4, None),
    ]


async def test_raw_responses_take_a_generated_method_over() -> None:
    async def generated(requests: object, context: object) -> object:
        yield messages_pb2.ConsumeResponse()

    async def raw(requests: AsyncIterator[object], context: object) -> object:
        async for _ in requests:  # answer each request; end when the client does
            yield consume_delivery("raw", 1, 2, 1, 3, b"x", 1)

    server = grpc.aio.server()
    handlers = {
        "Consume": grpc.stream_stream_rpc_method_handler(
            generated,
            messages_pb2.ConsumeRequest.FromString,
            messages_pb2.ConsumeResponse.SerializeToString,
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", handlers),))
    server.add_registered_method_handlers("t.S", handlers)  # as generated code does
    raw_responses(server, "t.S", "Consume", raw, messages_pb2.ConsumeRequest.FromString)
    port = listen(server)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream(
                "/t.S/Consume",
                request_serializer=messages_pb2.ConsumeRequest.SerializeToString,
                response_deserializer=messages_pb2.ConsumeResponse.FromString,
            )()
            await call.write(messages_pb2.ConsumeRequest())
            response = await asyncio.wait_for(call.read(), 5)
            assert response.delivery.stream == "raw"
            assert response.delivery.batch.arrow_ipc == b"x"
            await call.done_writing()
            assert await asyncio.wait_for(call.read(), 5) is grpc.aio.EOF
    finally:
        await server.stop(None)


def generated_response(
    stream: str, partition: int, base: int, count: int, time_us: int, data: bytes, n: int
) -> messages_pb2.ConsumeResponse:
    return messages_pb2.ConsumeResponse(
        delivery=messages_pb2.Delivery(
            stream=stream,
            partition=partition,
            batch=messages_pb2.StoredBatch(
                base_offset=base, count=count, publish_time_us=time_us, arrow_ipc=data
            ),
            delivery_count=n,
            offsets=[base, base + 2] if n > 1 else [],
        )
    )


@pytest.mark.parametrize(
    "response",
    [
        generated_response("s", 0, 0, 0, 0, b"", 0),
        generated_response("orders", 3, 10**12, 7, 1_700_000_000_000_000, b"arrow" * 99, 1),
        generated_response("ü" * 40, (1 << 32) - 1, (1 << 62) - 1, 1 << 20, -5, b"\x00" * 9, 3),
        messages_pb2.ConsumeResponse(),
    ],
)
def test_parses_what_the_generated_classes_write(response: messages_pb2.ConsumeResponse) -> None:
    encoded = response.SerializeToString()
    view = parse_consume_response(encoded)
    if not response.HasField("delivery"):
        assert view is None
        return
    assert view is not None
    d = response.delivery
    assert (view.stream, view.partition, view.delivery_count) == (
        d.stream,
        d.partition,
        d.delivery_count,
    )
    assert (view.batch.base_offset, view.batch.count, view.batch.publish_time_us) == (
        d.batch.base_offset,
        d.batch.count,
        d.batch.publish_time_us,
    )
    assert bytes(view.batch.arrow_ipc) == d.batch.arrow_ipc
    assert view.offsets == tuple(d.offsets)
    if d.batch.arrow_ipc:
        assert view.batch.arrow_ipc.obj is encoded, "the batch is not copied"


def test_parses_fields_in_any_order_unknown_fields_and_unpacked_offsets() -> None:
    batch = messages_pb2.StoredBatch(base_offset=5, count=2, arrow_ipc=b"xy").SerializeToString()
    # delivery_count first, an unknown varint field 9, offsets unpacked (field 5, varint).
    delivery = (
        b"\x20\x02"
        + b"\x48\x07"
        + b"\x28\x05"
        + b"\x28\x06"
        + b"\x1a"
        + bytes([len(batch)])
        + batch
    )
    encoded = b"\x0a" + bytes([len(delivery)]) + delivery
    assert messages_pb2.ConsumeResponse.FromString(encoded).delivery.offsets == [5, 6]
    view = parse_consume_response(encoded)
    assert view is not None
    assert (view.delivery_count, view.offsets, view.batch.base_offset) == (2, (5, 6), 5)
    assert bytes(view.batch.arrow_ipc) == b"xy"


@pytest.mark.parametrize("data", [b"\x0a\x05\x0a", b"\x0a", b"\x0b\x00", b"\x08\xff"])
def test_malformed_input_raises(data: bytes) -> None:
    with pytest.raises(WireError):
        parse_consume_response(data)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=64))
def test_any_bytes_on_a_consume_mux_are_read_or_refused_as_wire_errors(data: bytes) -> None:
    """What a gateway reads from a router's mux: a response, or WireError, never a crash."""
    try:
        responses = list(parse_mux_responses(data))
    except WireError:
        return
    for response in responses:
        assert (response.consume is None) != (response.end is None)
