"""`decode_column` reads one column of a stored batch as `decode_batch` would (the
dedup window's rebuild reads the ids of thousands of small batches)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tamto_protocol.batch import (
    ID_TYPE,
    PAYLOAD_TYPE,
    BatchFormatError,
    decode_batch,
    decode_column,
    encode_record_batch,
    make_batch,
)


def batch(*ids: str | None) -> pa.RecordBatch:
    return make_batch(pa.array([b"x"] * len(ids), PAYLOAD_TYPE), ids=pa.array(ids, ID_TYPE))


def test_a_column_equals_the_decoded_batchs() -> None:
    data = encode_record_batch(batch("p:1", None, "q"))
    assert decode_column(data, "id").equals(decode_batch(data).column("id"))
    assert decode_column(data, "payload").to_pylist() == [b"x"] * 3


def test_a_stream_of_several_batches_is_read_whole() -> None:
    sink = pa.BufferOutputStream()
    first = batch("a:1", "a:2")
    with pa.ipc.new_stream(sink, first.schema) as writer:
        writer.write_batch(first)
        writer.write_batch(batch("a:3"))
    assert decode_column(sink.getvalue(), "id").to_pylist() == ["a:1", "a:2", "a:3"]


def test_another_schema_or_garbage_is_refused_as_decode_batch_refuses_it() -> None:
    other = pa.record_batch({"id": pa.array(["a"])})
    with pytest.raises(BatchFormatError, match="schema"):
        decode_column(encode_record_batch(other), "id")
    with pytest.raises(BatchFormatError):
        decode_column(b"not arrow", "id")
