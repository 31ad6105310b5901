"""The hand-written publish-path encoders produce exactly what protobuf would."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from tamto_protocol.batch import (
    BATCH_SCHEMA,
    decode_batch,
    encode_record_batch,
    make_batch,
    prefixed_numbers,
    sequence_ids,
    string_scalar,
)
from tamto_protocol.v1 import gateway_pb2, messages_pb2, router_pb2, storage_pb2
from tamto_protocol.wire import (
    order_of,
    publish_request,
    router_append_request,
    storage_append_request,
)

ARROW = encode_record_batch(make_batch(pa.array([b"a", b"bc"], pa.binary())))


@pytest.mark.parametrize(
    ("stream", "partition", "data", "count", "call_id"),
    [
        ("s", 0, ARROW, 2, 0),
        ("stream-é", 3, ARROW, 2, 1),
        ("", 0, b"", 0, 0),
        ("s", 2**32 - 1, b"x" * 300, 1, 2**64 - 1),
    ],
)
def test_publish_and_router_append_match_protobuf(
    stream: str, partition: int, data: bytes, count: int, call_id: int
) -> None:
    batch = messages_pb2.RecordBatch(arrow_ipc=data, count=count)
    expected = gateway_pb2.PublishRequest(
        stream=stream, partition=partition, batch=batch, call_id=call_id
    )
    encoded = publish_request(stream, partition, data, count, call_id)
    assert encoded == expected.SerializeToString()
    router = router_pb2.RouterAppendRequest(
        stream=stream, partition=partition, batch=batch, call_id=call_id
    )
    assert router_append_request(stream, partition, data, count, call_id) == (
        router.SerializeToString()
    )


def test_a_pyarrow_buffer_is_sent_without_a_bytes_copy_first() -> None:
    buffer = pa.py_buffer(ARROW)
    assert publish_request("s", 1, buffer, 2) == publish_request("s", 1, ARROW, 2)


@pytest.mark.parametrize(("epoch", "call_id"), [(0, 0), (1, 7), (2**40, 300), (-1, 0)])
def test_storage_append_matches_protobuf(epoch: int, call_id: int) -> None:
    batches = [(0, 2, 1_700_000_000_000_000, ARROW), (2, 1, 0, b"z" * 200), (3, 0, -5, b"")]
    expected = storage_pb2.StorageAppendRequest(
        partition=storage_pb2.PartitionRef(stream="s", partition=7),
        epoch=epoch,
        batches=[
            messages_pb2.StoredBatch(base_offset=b, count=c, publish_time_us=t, arrow_ipc=bytes(d))
            for b, c, t, d in batches
        ],
        call_id=call_id,
    )
    encoded = storage_append_request("s", 7, epoch, batches, call_id)
    assert encoded == expected.SerializeToString()
    assert storage_pb2.StorageAppendRequest.FromString(encoded) == expected
    empty_ref = storage_pb2.StorageAppendRequest(epoch=epoch, call_id=call_id)
    assert storage_append_request("", 0, epoch, [], call_id) == empty_ref.SerializeToString()


def test_sequence_ids_and_batches() -> None:
    ids = sequence_ids("p-1", 5, 3)
    assert ids.to_pylist() == ["p-1:5", "p-1:6", "p-1:7"]
    assert prefixed_numbers("x", pa.array([0, 12], pa.int64())).to_pylist() == ["x:0", "x:12"]
    assert string_scalar("é").as_py() == "é"
    batch = make_batch(pa.array([b"a", b"b", b"c"], pa.binary()), ids=ids, producer="me")
    assert batch.schema.equals(BATCH_SCHEMA)
    assert decode_batch(encode_record_batch(batch)).column("producer").to_pylist() == ["me"] * 3
    assert sequence_ids("p", 0, 0).to_pylist() == []


_NO_CONVERSION = """
import subprocess
import sys
import pyarrow as pa
from tamto_protocol.batch import (
    decode_batch, encode_record_batch, make_batch, prefixed_numbers, sequence_ids
)
payloads = pa.Array.from_buffers(
    pa.binary(), 2, [None, pa.py_buffer(bytes(12)), pa.py_buffer(b"ab")]
)
ids = sequence_ids("p-1", 5, 2)
prefixed_numbers("p", pa.Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(bytes(8))]))
decode_batch(encode_record_batch(make_batch(payloads, ids=ids, producer="me")))
assert "pandas" not in sys.modules, "a Python object was converted"
"""


def test_building_batches_converts_no_python_objects() -> None:
    # pyarrow imports pandas (about two seconds) before its first conversion of Python
    # objects; the publish path of producers and servers must not pay that.
    result = subprocess.run(
        [sys.executable, "-c", _NO_CONVERSION], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_decode_batch_combines_several_record_batches() -> None:
    one = make_batch(pa.array([b"a"], pa.binary()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, BATCH_SCHEMA) as writer:
        writer.write_batch(one)
        writer.write_batch(one)
    assert decode_batch(sink.getvalue().to_pybytes()).num_rows == 2


@pytest.mark.parametrize("rows", [1, 300])  # below and above the exact-size encoding
def test_a_batch_encodes_to_the_same_stream_small_or_large(rows: int) -> None:
    payloads = pa.array([bytes([i % 256]) * 1024 for i in range(rows)], pa.binary())
    batch = make_batch(payloads, ids=sequence_ids("p", 0, rows), producer="me")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    encoded = encode_record_batch(batch)
    assert encoded == sink.getvalue().to_pybytes()
    assert decode_batch(encoded).equals(batch)


@pytest.mark.parametrize("after", [None, 0, 41])
def test_a_producer_order_goes_on_the_wire_and_back_as_it_was(after: int | None) -> None:
    order = ("p-1a2b", 57, after)
    sent = gateway_pb2.PublishRequest.FromString(publish_request("s", 1, b"ipc", 3, 9, order))
    assert order_of(sent) == order
    assert sent.order.HasField("after_sequence") is (after is not None)  # 0 is not "none"
    passed = router_pb2.RouterAppendRequest.FromString(
        router_append_request("s", 1, b"ipc", 3, 9, order_of(sent))
    )
    assert order_of(passed) == order
    assert order_of(gateway_pb2.PublishRequest.FromString(publish_request("s", 1, b"i", 1))) is None
