"""Reading segments by offset: only the row groups a read needs, the same rows as
decoding the whole file, row groups bounded by bytes, and the decoded-group cache."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from storage_testkit import make_batch

from tamto_common.config import load_config
from tamto_common.errors import ConfigError
from tamto_protocol.v1 import messages_pb2, storage_pb2
from tamto_storage import segments
from tamto_storage.config import StorageConfig
from tamto_storage.grpc_api import read_response
from tamto_storage.model import StoredBatch
from tamto_storage.segment_log import SegmentLog
from tamto_storage.segment_reads import DecodedGroups, read_rows, to_stored_batches
from tamto_storage.segments import build_table, row_group_bounds, write_parquet, write_segment

BATCH = 10  # messages per stored batch
PAD = 90  # payload bytes beyond "message-<offset>"


def batches(count: int, first: int = 0) -> list[StoredBatch]:
    return [make_batch(first + i * BATCH, BATCH, pad=PAD) for i in range(count)]


def row_bytes() -> int:
    """What `row_group_bounds` counts for the largest test row below offset 100
    (payloads of 99 or 100 bytes: "message-<offset>" and the padding)."""
    table = build_table(batches(8))
    return int(segments._row_sizes(table).max())


@pytest.fixture
def two_batches_per_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups of two test batches (20 rows), as if the byte limit were small."""
    monkeypatch.setattr(segments, "ROW_GROUP_BYTES", 2 * BATCH * row_bytes() + 5)


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row groups each read decodes, in order (record of `read_row_group` calls)."""
    calls: list[int] = []
    original = pq.ParquetFile.read_row_group

    def spy(self: pq.ParquetFile, i: int, *args: object, **kwargs: object) -> pa.Table:
        calls.append(i)
        return original(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    return calls


def group_offsets(path: Path) -> list[tuple[int, int]]:
    """(first, last) offset of each row group of a file, from its footer."""
    meta = pq.read_metadata(path)
    stats = [meta.row_group(i).column(0).statistics for i in range(meta.num_row_groups)]
    return [(s.min, s.max) for s in stats]


def expected_rows(path: Path, from_offset: int, max_messages: int, max_bytes: int) -> list[int]:
    """The offsets a read returns, computed the plain way: decode everything, then cut."""
    table = pq.read_table(path)
    table = table.filter(pc.greater_equal(table.column("offset"), from_offset))
    offsets: list[int] = table.column("offset").to_pylist()
    sizes = pc.binary_length(table.column("payload")).to_pylist()
    if max_messages:
        offsets, sizes = offsets[:max_messages], sizes[:max_messages]
    within = list(itertools.accumulate(sizes))
    keep = max(sum(1 for s in within if s <= max_bytes), 1)
    return offsets[:keep]


def offsets(table: pa.Table) -> list[int]:
    values: list[int] = table.column("offset").to_pylist()
    return values


def test_row_groups_end_on_batch_boundaries_within_the_byte_limit(
    tmp_path: Path, two_batches_per_group: None
) -> None:
    segment = write_segment(0, tmp_path, batches(7))
    assert group_offsets(segment.path) == [(0, 19), (20, 39), (40, 59), (60, 69)]


def test_a_batch_larger_than_the_limit_is_split_and_the_next_starts_a_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(segments, "ROW_GROUP_BYTES", 4 * row_bytes())
    table = build_table(batches(2))
    assert row_group_bounds(table) == [(0, 4), (4, 8), (8, 10), (10, 14), (14, 18), (18, 20)]
    monkeypatch.setattr(segments, "ROW_GROUP_ROWS", 3)
    monkeypatch.setattr(segments, "ROW_GROUP_BYTES", 1)  # smaller than any row
    assert row_group_bounds(build_table(batches(1)))[:2] == [(0, 1), (1, 2)]
    assert row_group_bounds(build_table(batches(1)).slice(0, 0)) == [(0, 0)]


def test_row_groups_of_the_default_limits(tmp_path: Path) -> None:
    # 16,384 rows at most; ~100-byte messages stay far below 8 MiB a group.
    many = [make_batch(i * 1000, 1000) for i in range(20)]
    segment = write_segment(0, tmp_path, many)
    assert group_offsets(segment.path) == [(0, 15_999), (16_000, 19_999)]
    big = [make_batch(i * 100, 100, pad=30_000) for i in range(6)]  # ~3 MB a batch
    segment = write_segment(0, tmp_path, big)
    assert group_offsets(segment.path) == [(0, 199), (200, 399), (400, 599)]


def test_unique_columns_are_plain_and_repeating_ones_dictionary_encoded(tmp_path: Path) -> None:
    segment = write_segment(0, tmp_path, batches(2))
    group = pq.read_metadata(segment.path).row_group(0)
    encodings = {
        group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)
    }
    for unique in ("payload", "offset", "id"):
        assert "RLE_DICTIONARY" not in encodings.pop(unique), unique
    assert set(encodings) == {
        "publish_time",
        "event_time",
        "key",
        "headers.key_value.key",
        "headers.key_value.value",
        "producer",
    }
    assert all("RLE_DICTIONARY" in e for e in encodings.values()), encodings


def test_a_read_decodes_only_the_row_groups_it_needs(
    tmp_path: Path, two_batches_per_group: None, decoded: list[int]
) -> None:
    segment = write_segment(0, tmp_path, batches(8))  # groups: 0-19, 20-39, 40-59, 60-79
    assert offsets(read_rows(segment.path, 25, 10, 1 << 20, cache=None)) == list(range(25, 35))
    assert decoded == [1]
    decoded.clear()
    assert offsets(read_rows(segment.path, 35, 10, 1 << 20, cache=None)) == list(range(35, 45))
    assert decoded == [1, 2], "across a group boundary: both, no more"
    decoded.clear()
    # Payloads of 99 bytes (offsets 0-9) and 100 (10-99): 2,500 bytes end at offset 24.
    assert offsets(read_rows(segment.path, 0, 0, 2_500, cache=None)) == list(range(25))
    assert decoded == [0, 1], "stops once the bytes are covered"
    decoded.clear()
    assert len(offsets(read_rows(segment.path, 79, 0, 1 << 20, cache=None))) == 1
    assert decoded == [3]


def test_reads_return_what_decoding_the_whole_file_would(
    tmp_path: Path, two_batches_per_group: None
) -> None:
    segment = write_segment(0, tmp_path, batches(8))
    size = len(segments.build_table(batches(1)).column("payload")[0].as_py())
    for from_offset, max_messages, max_bytes in itertools.product(
        (0, 5, 19, 20, 21, 39, 55, 79), (0, 1, 7, 20, 45), (1, size * 3, size * 25, 1 << 20)
    ):
        got = offsets(read_rows(segment.path, from_offset, max_messages, max_bytes, cache=None))
        want = expected_rows(segment.path, from_offset, max_messages, max_bytes)
        assert got == want, (from_offset, max_messages, max_bytes)


def carried(directory: Path) -> Path:
    """A carried-forward-like file: offsets 0..79 with gaps, written like a rewrite."""
    table = build_table(batches(8))
    keep = pc.invert(pc.is_in(pc.divide(table.column("offset"), 10), pa.array([1, 2, 5])))
    table = table.filter(keep)  # 0-9, 30-49, 60-79
    path = directory / "carried.parquet"
    with path.open("wb") as f:
        write_parquet(table, f)
    return path


def test_reads_of_a_segment_with_gaps_continue_at_the_next_stored_offset(
    tmp_path: Path, two_batches_per_group: None, decoded: list[int]
) -> None:
    path = carried(tmp_path)
    assert group_offsets(path) == [(0, 39), (40, 69), (70, 79)]
    assert offsets(read_rows(path, 12, 5, 1 << 20, cache=None)) == list(range(30, 35))
    assert decoded == [0]
    for from_offset, max_messages in itertools.product((0, 9, 10, 29, 50, 55, 59, 61), (0, 3, 25)):
        got = offsets(read_rows(path, from_offset, max_messages, 1 << 20, cache=None))
        assert got == expected_rows(path, from_offset, max_messages, 1 << 20)
    batches_read = to_stored_batches(read_rows(path, 5, 0, 1 << 20, cache=None))
    runs = [(b.base_offset, b.count) for b in batches_read]
    assert runs == [(5, 5), (30, 10), (40, 10), (60, 10), (70, 10)], "one per stored run"


def old_layout(directory: Path, stored: list[StoredBatch]) -> Path:
    """A segment as written before row groups were bounded by bytes: one big group."""
    path = directory / "old.parquet"
    pq.write_table(build_table(stored), path, row_group_size=16_384, compression="zstd")
    return path


def test_segments_of_the_old_layout_read_the_same_and_decode_once_with_a_cache(
    tmp_path: Path, decoded: list[int]
) -> None:
    path = old_layout(tmp_path, batches(8))
    assert group_offsets(path) == [(0, 79)]
    for from_offset, max_messages in itertools.product((0, 33, 79), (0, 1, 30)):
        got = offsets(read_rows(path, from_offset, max_messages, 1 << 20, cache=None))
        assert got == expected_rows(path, from_offset, max_messages, 1 << 20)
    decoded.clear()
    cache = DecodedGroups(1 << 20)
    offset, reads = 0, 0
    while offset < 80:  # a sequential walk, as the router's reads of a backlog
        table = read_rows(path, offset, 15, 1 << 20, cache=cache)
        assert offsets(table) == list(range(offset, min(offset + 15, 80)))
        offset, reads = offset + table.num_rows, reads + 1
    assert reads == 6
    assert decoded == [0], "decoded once, then served from the cache"


def test_the_cache_never_serves_a_replaced_file(tmp_path: Path, decoded: list[int]) -> None:
    cache = DecodedGroups(1 << 20)
    path = old_layout(tmp_path, batches(2))
    assert offsets(read_rows(path, 0, 0, 1 << 20, cache=cache)) == list(range(20))
    # A promoted rewrite replaces the file under the same name with fewer rows.
    sparse = build_table(batches(2)).slice(5, 3)
    replacement = tmp_path / "new.parquet"
    pq.write_table(sparse, replacement)
    os.replace(replacement, path)
    assert offsets(read_rows(path, 0, 0, 1 << 20, cache=cache)) == [5, 6, 7]
    assert decoded == [0, 0]


def test_the_cache_keeps_recent_groups_within_its_budget() -> None:
    table = build_table(batches(1))
    cache = DecodedGroups(2 * table.nbytes)
    for key in range(3):
        cache.put((key,), table)
    assert cache.get((0,)) is None, "the oldest went"
    assert cache.get((1,)) is not None
    cache.put((3,), table)
    assert cache.get((2,)) is None, "least recently used went, not the one just read"
    assert cache.get((1,)) is not None
    small = DecodedGroups(table.nbytes - 1)
    small.put((0,), table)
    assert small.get((0,)) is None, "a group larger than the budget is not kept"


async def test_a_partition_reads_segments_through_the_cache_it_was_given(
    tmp_path: Path, decoded: list[int]
) -> None:
    segment = write_segment(0, tmp_path, batches(4))
    for cache in (DecodedGroups(1 << 20), None):
        decoded.clear()
        log = SegmentLog([segment], 0, cache)
        first = await log.read(0, 15, 1 << 20)
        rest = await log.read(first[-1].end_offset, 0, 1 << 20)
        assert rest[-1].end_offset == 40
        # Without a cache, the continuing read decodes the group again.
        assert decoded == ([0] if cache is not None else [0, 0])


def test_the_storage_config_sizes_the_cache_or_turns_it_off() -> None:
    assert StorageConfig().decoded_groups() is not None
    assert StorageConfig(segment_read_cache_mb=0).decoded_groups() is None
    with pytest.raises(ConfigError, match=r"--segment-read-cache-mb .*must not be negative"):
        load_config(StorageConfig, "storage", ["--segment-read-cache-mb", "-1"], {})


def test_the_read_response_is_what_protobuf_serialises() -> None:
    cases: list[tuple[list[StoredBatch], int]] = [
        ([], 0),
        ([], 7),
        ([make_batch(0, 1)], 1),
        ([make_batch(0, 3), make_batch(3, 2)], 5),
        ([StoredBatch(2**40, 70_000, 1_700_000_000_000_000, b"x" * 300)], 2**40 + 70_000),
        ([StoredBatch(0, 0, 0, b"")], 0),
    ]
    for stored, next_offset in cases:
        message = storage_pb2.ReadResponse(
            batches=[
                messages_pb2.StoredBatch(
                    base_offset=b.base_offset,
                    count=b.count,
                    publish_time_us=b.publish_time_us,
                    arrow_ipc=bytes(b.arrow_ipc),
                )
                for b in stored
            ],
            next_offset=next_offset,
        )
        assert read_response(stored, next_offset) == message.SerializeToString()


_NO_CONVERSION = """
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
from tamto_protocol.batch import encode_record_batch, make_batch
from tamto_storage.model import StoredBatch
from tamto_storage.segment_reads import read_rows, to_stored_batches
from tamto_storage.segments import write_segment

payloads = pa.Array.from_buffers(
    pa.binary(), 2, [None, pa.py_buffer(bytes(12)), pa.py_buffer(b"ab")]
)
data = encode_record_batch(make_batch(payloads))
with tempfile.TemporaryDirectory() as directory:
    segment = write_segment(0, Path(directory), [StoredBatch(0, 2, 5, data)])
    to_stored_batches(read_rows(segment.path, 1, 10, 1 << 20))
assert "pandas" not in sys.modules, "a Python object or numpy array was converted"
"""


def test_sealing_and_reading_convert_no_python_objects() -> None:
    # pyarrow imports pandas (one to two seconds of CPU, holding the GIL) before its
    # first conversion of Python objects or numpy arrays; a storage node did that on
    # its first seal, in the middle of serving appends.
    result = subprocess.run(
        [sys.executable, "-c", _NO_CONVERSION], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
