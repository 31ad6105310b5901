"""`validate_batch` refuses every batch whose Arrow buffers lie, naming the column."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tamto_protocol.batch import (
    BatchFormatError,
    decode_batch,
    decode_valid_batch,
    encode_record_batch,
    slice_batch,
    validate_batch,
)
from tamto_testing.crafted_batches import CRAFTED, ROWS, valid_batch
from tamto_testing.hostile_requests import huge_schema_batch


def test_the_valid_base_batch_passes() -> None:
    batch = validate_batch(valid_batch(), ROWS, 0)
    assert batch.num_rows == ROWS


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_lying_batch_is_refused_naming_its_column(name: str) -> None:
    crafted = CRAFTED[name]
    with pytest.raises(BatchFormatError) as refused:
        validate_batch(crafted.arrow_ipc, crafted.count, 0)
    assert f"column {crafted.column!r}" in str(refused.value)


def test_the_issues_batches_pass_the_schema_only_decode() -> None:
    """What made them dangerous: the IPC reader alone accepts them."""
    for name in ("payload offsets decrease", "payload offset past the data"):
        assert decode_batch(CRAFTED[name].arrow_ipc).num_rows == ROWS


def test_a_lying_batch_after_a_good_one_is_refused_before_they_are_combined() -> None:
    """Combining record batches reads their values: each is checked first."""
    good = decode_batch(valid_batch())
    bad = decode_batch(CRAFTED["payload offset past the data"].arrow_ipc)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, good.schema) as writer:
        writer.write_batch(good)
        writer.write_batch(bad)
    with pytest.raises(BatchFormatError, match="column 'payload'"):
        decode_valid_batch(sink.getvalue().to_pybytes())


def test_truncated_and_garbage_streams_are_refused() -> None:
    data = valid_batch()
    for broken in (data[: len(data) // 2], data[:-9], b"\xff" * 64, b""):
        with pytest.raises(BatchFormatError):
            validate_batch(broken, ROWS, 0)


def test_a_null_payload_is_refused_naming_the_column() -> None:
    good = decode_batch(valid_batch())
    nullable = good.schema.set(1, pa.field("payload", pa.binary()))
    columns = list(good.columns)
    columns[1] = pa.array([None] * ROWS, pa.binary())
    data = encode_record_batch(pa.RecordBatch.from_arrays(columns, schema=nullable))
    with pytest.raises(BatchFormatError, match="column 'payload'"):
        validate_batch(data, ROWS, 0)


def test_a_column_name_that_is_not_utf8_is_refused() -> None:
    """Found by the long fuzz run: pyarrow raises UnicodeDecodeError reading the name."""
    data = valid_batch()
    assert data.count(b"event_time") == 1
    with pytest.raises(BatchFormatError):
        validate_batch(data.replace(b"event_time", b"\xe5vent_time"), ROWS, 0)


def test_slicing_a_lying_batch_is_refused_rather_than_copying_memory() -> None:
    """Re-encoding a slice copied what the lying last offset pointed at: about 4,000
    bytes from outside the batch, in a well-formed batch (a leak of memory the batch never owned)."""
    crafted = CRAFTED["payload offset past the data"]
    with pytest.raises(BatchFormatError, match="column 'payload'"):
        slice_batch(crafted.arrow_ipc, ROWS - 7, 7)
    sliced = decode_batch(slice_batch(valid_batch(), ROWS - 7, 7))
    assert (
        sliced.column("payload").to_pylist()
        == decode_batch(valid_batch()).column("payload").to_pylist()[ROWS - 7 :]
    )


def test_a_huge_schema_is_refused_with_a_short_message_naming_the_column() -> None:
    data = huge_schema_batch()
    with pytest.raises(BatchFormatError) as refused:
        validate_batch(data, 1, 0)
    message = str(refused.value)
    assert "column 'key' has type struct<field_with_a_long_name_000000" in message
    assert "more characters), expected binary" in message
    assert len(message) < 500, len(message)
