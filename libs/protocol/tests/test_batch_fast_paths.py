"""The fast paths of encoding and reading Tamto's own batches (the request/reply
profile: a one-message batch's stream writer, stream reader and payload-size kernels
cost more than the rest of a request at the gateway) give what the general paths give."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tamto_protocol.batch import (
    HEADERS_TYPE,
    KEY_TYPE,
    PAYLOAD_TYPE,
    BatchFormatError,
    _known_schema_batches,
    decode_batch,
    ipc_buffer,
    make_batch,
    validate_batch,
)


def payloads(*sizes: int) -> pa.Array:
    return pa.array([bytes([i % 251]) * size for i, size in enumerate(sizes)], PAYLOAD_TYPE)


def writer_bytes(*batches: pa.RecordBatch, end_marker: bool = True) -> bytes:
    """What a stream writer makes of `batches` (optionally without its end marker)."""
    sink = pa.BufferOutputStream()
    writer = pa.ipc.new_stream(sink, batches[0].schema)
    for batch in batches:
        writer.write_batch(batch)
    if end_marker:
        writer.close()
    return bytes(sink.getvalue().to_pybytes())


BATCHES = {
    "one message": make_batch(payloads(100)),
    "keys, headers, producer": make_batch(
        payloads(*range(50)),
        keys=pa.array([b"k"] * 50, KEY_TYPE),
        headers=pa.array([[("a", "b")]] * 50, HEADERS_TYPE),
        producer="p",
    ),
    "an empty payload": make_batch(payloads(0)),
    "a slice": make_batch(payloads(*[1000] * 100)).slice(3, 10),
}


@pytest.mark.parametrize("name", BATCHES)
def test_a_tamto_batch_encodes_to_the_stream_writers_bytes_and_reads_back(name: str) -> None:
    batch = BATCHES[name]
    data = ipc_buffer(batch).to_pybytes()
    assert data == writer_bytes(batch)
    read = _known_schema_batches(data)
    assert read is not None
    assert len(read) == 1
    assert read[0].equals(batch)
    assert validate_batch(data, batch.num_rows, 1 << 20).equals(batch)


def test_a_batch_of_another_schema_takes_the_general_paths() -> None:
    other = pa.record_batch({"id": pa.array(["a", "b"])})
    data = ipc_buffer(other).to_pybytes()
    assert data == writer_bytes(other)
    assert _known_schema_batches(data) is None
    with pytest.raises(BatchFormatError, match="schema does not match"):
        decode_batch(data)


def test_several_batches_and_a_missing_end_marker_read_as_the_stream_reader_reads_them() -> None:
    first, second = make_batch(payloads(1, 2)), make_batch(payloads(3))
    for data in (writer_bytes(first, second), writer_bytes(first, second, end_marker=False)):
        read = _known_schema_batches(data)
        assert read is not None
        assert [b.num_rows for b in read] == [2, 1]
        whole = pa.ipc.open_stream(data).read_all().combine_chunks().to_batches()[0]
        assert decode_batch(data).equals(whole)


def test_a_truncated_tamto_stream_falls_back_to_the_general_reader_and_is_refused() -> None:
    data = ipc_buffer(make_batch(payloads(100))).to_pybytes()
    assert _known_schema_batches(data[:-40]) is None
    with pytest.raises(BatchFormatError):
        validate_batch(data[:-40], 1, 1 << 20)


def test_the_payload_limit_holds_whatever_the_value_buffer_holds() -> None:
    # Together over the limit, each within it: accepted (the buffer's size is only a
    # bound, past which each payload is measured).
    within = ipc_buffer(make_batch(payloads(600, 600))).to_pybytes()
    assert validate_batch(within, 2, 1000).num_rows == 2
    over = ipc_buffer(make_batch(payloads(10, 1001))).to_pybytes()
    with pytest.raises(
        BatchFormatError,
        match=r"message 1 of the batch: it takes 1001 bytes .*, over the message limit of 1000",
    ):
        validate_batch(over, 2, 1000)
