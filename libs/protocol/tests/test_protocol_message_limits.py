"""A batch may not cost more than its limits say: compressed buffers are not unpacked
past `MAX_UNPACKED_BYTES`, the message limit covers every field, and values no
reader can represent are refused (docs/validation.md, Sizes and values)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tamto_protocol.batch import (
    MAX_EVENT_TIME_US,
    MAX_UNPACKED_BYTES,
    MIN_EVENT_TIME_US,
    PAYLOAD_TYPE,
    BatchFormatError,
    decode_valid_batch,
    make_batch,
    validate_batch,
)
from tamto_protocol.ipc_bounds import check_unpacked_size
from tamto_protocol.message_size import MAX_HEADERS_BYTES, MAX_ID_BYTES, MAX_KEY_BYTES
from tamto_testing.oversized_batches import (
    BOMB_ROWS,
    bomb,
    compressed,
    forged_unpacked_size,
    one_message,
)

MIB = 1 << 20


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_compressed_batch_within_the_bound_is_read(codec: str) -> None:
    batch = make_batch(pa.array([b"m" * 1000, b"n" * 10], PAYLOAD_TYPE))
    assert validate_batch(compressed(batch, codec), 2, MIB).equals(batch)


def test_a_compression_bomb_is_refused_before_it_is_unpacked() -> None:
    data = bomb()
    assert len(data) < 100_000  # ~72 MB of zeros
    before = pa.total_allocated_bytes()
    with pytest.raises(BatchFormatError, match=f"unpack to more than {MAX_UNPACKED_BYTES} bytes"):
        validate_batch(data, BOMB_ROWS, MIB)
    assert pa.total_allocated_bytes() == before  # nothing kept
    # Where no size limit applies (storage, a consumer), the bound holds all the same.
    with pytest.raises(BatchFormatError, match="refused before unpacking"):
        decode_valid_batch(data)


def test_a_forged_unpacked_size_is_refused_without_allocating_it() -> None:
    pool = pa.default_memory_pool()
    peak = pool.max_memory()
    with pytest.raises(BatchFormatError, match="refused before unpacking"):
        validate_batch(forged_unpacked_size(1 << 40), 10, MIB)
    assert pool.max_memory() == peak
    with pytest.raises(BatchFormatError, match="unpacked size of -7"):
        validate_batch(forged_unpacked_size(-7), 10, MIB)


def test_the_bound_counts_what_the_prefixes_record() -> None:
    data = compressed(make_batch(pa.array([b"a" * 5000] * 4, PAYLOAD_TYPE)))
    check_unpacked_size(data, 20_000 + 1024)
    with pytest.raises(ValueError, match="more than 19999 bytes"):
        check_unpacked_size(data, 19_999)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"key": b"k" * (MAX_KEY_BYTES + 1)}, f"its key take {MAX_KEY_BYTES + 1} bytes"),
        ({"id": "i" * (MAX_ID_BYTES + 1)}, f"its id take {MAX_ID_BYTES + 1} bytes"),
        (
            {"headers": {"h": "v" * MAX_HEADERS_BYTES}},
            f"its headers take {MAX_HEADERS_BYTES + 1} bytes",
        ),
    ],
)
def test_each_field_has_its_cap(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(BatchFormatError, match=f"message 0 of the batch: {problem}, over the cap"):
        validate_batch(one_message(**fields), 1, 100 * MIB)  # type: ignore[arg-type]


def test_the_message_limit_is_on_the_whole_message() -> None:
    limit = 100_000
    assert validate_batch(one_message(payload=b"p" * limit), 1, limit).num_rows == 1
    parts = {"key": b"k" * 40_000, "headers": {"h": "v" * 40_000}, "id": "i" * 1000}
    assert validate_batch(one_message(payload=b"p" * 18_999, **parts), 1, limit)  # type: ignore[arg-type]
    over = one_message(payload=b"p" * 20_000, **parts)  # type: ignore[arg-type]
    with pytest.raises(BatchFormatError, match=r"it takes 101001 bytes .* over the message limit"):
        validate_batch(over, 1, limit)
    # A tiny payload does not carry a huge key past the limit.
    with pytest.raises(BatchFormatError, match="over the message limit of 1000"):
        validate_batch(one_message(payload=b"p", key=b"k" * 1000), 1, 1000)


@pytest.mark.parametrize("event_time_us", [MAX_EVENT_TIME_US + 1, MIN_EVENT_TIME_US - 1, -(2**63)])
def test_an_event_time_no_reader_can_represent_is_refused(event_time_us: int) -> None:
    with pytest.raises(BatchFormatError, match="column 'event_time': a value lies outside"):
        validate_batch(one_message(event_time_us=event_time_us), 1, MIB)


@pytest.mark.parametrize("event_time_us", [MAX_EVENT_TIME_US, MIN_EVENT_TIME_US, 0])
def test_the_edges_of_the_event_time_range_are_read(event_time_us: int) -> None:
    batch = validate_batch(one_message(event_time_us=event_time_us), 1, MIB)
    assert batch.column("event_time")[0].as_py() is not None  # a datetime, no OverflowError
