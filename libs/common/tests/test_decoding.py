"""Bytes that do not parse become an `Undecodable` naming the field at fault and the
call it belongs to, where it can be read (`tamto_common.decoding`)."""

from __future__ import annotations

from tamto_common.decoding import Undecodable, carries_call_id, lenient
from tamto_protocol.v1 import gateway_pb2, messages_pb2

PUBLISH = gateway_pb2.PublishRequest(
    stream="zzzz",
    partition=1,
    batch=messages_pb2.RecordBatch(arrow_ipc=b"abc", count=1),
    call_id=77,
)


def test_valid_bytes_parse_as_before() -> None:
    parsed = lenient(gateway_pb2.PublishRequest.FromString)(PUBLISH.SerializeToString())
    assert parsed == PUBLISH


def test_a_string_that_is_not_utf8_is_named_with_its_call() -> None:
    data = PUBLISH.SerializeToString().replace(b"zzzz", b"\xff\xfe\xfd\xfc")
    bad = lenient(gateway_pb2.PublishRequest.FromString)(data)
    assert bad == Undecodable("tamto.v1.PublishRequest", "field 'stream' is not valid UTF-8", 77)
    assert str(bad.error()) == (
        "malformed tamto.v1.PublishRequest: field 'stream' is not valid UTF-8"
    )


def test_a_nested_field_is_named_by_its_path() -> None:
    subscribe = messages_pb2.ConsumeRequest(
        subscribe=messages_pb2.Subscribe(stream="s", subscription="zzzz")
    )
    data = subscribe.SerializeToString().replace(b"zzzz", b"\xc3\x28ab")
    bad = lenient(messages_pb2.ConsumeRequest.FromString)(data)
    assert isinstance(bad, Undecodable)
    assert bad.problem == "field 'subscribe': field 'subscription' is not valid UTF-8"
    assert bad.call_id == 0


def test_truncated_bytes_name_the_field_they_end_in() -> None:
    data = PUBLISH.SerializeToString()
    cut = data[: data.index(b"abc") + 1]
    bad = lenient(gateway_pb2.PublishRequest.FromString)(cut)
    assert isinstance(bad, Undecodable)
    assert (
        bad.problem
        == "the bytes end or break inside field 'batch' (truncated length-delimited field)"
    )
    assert bad.call_id == 0  # call_id comes last: cut off with the rest


def test_an_invalid_wire_type_is_named() -> None:
    bad = lenient(gateway_pb2.PublishRequest.FromString)(b"\x0f" + PUBLISH.SerializeToString())
    assert isinstance(bad, Undecodable)
    assert bad.problem == "the bytes end or break inside field 'stream' (unsupported wire type 7)"


def test_pipelined_requests_are_those_with_a_call_id() -> None:
    assert carries_call_id(gateway_pb2.PublishRequest.FromString)
    assert not carries_call_id(messages_pb2.ConsumeRequest.FromString)
