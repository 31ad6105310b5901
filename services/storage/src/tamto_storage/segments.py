"""Parquet segments: building them from WAL batches, writing them safely, reading them back.

A segment holds a contiguous run of whole stored batches in the schema of
`tamto_protocol.segment` (offset and publish_time added to the producer's
columns). Building is vectorised: the producer's Arrow batches are concatenated
as they are, `offset` is one `numpy.arange` over the run (offsets are
contiguous) and `publish_time` one `numpy.repeat` of the per-batch times.

Writing: a hidden temporary file (``.segment-...parquet.<random>.tmp``, which
Spark's listing skips), fsync, rename to the name fixed by the offsets, fsync
of the directory. A reader therefore sees a segment whole or not at all, and
sealing the same offsets again writes the same file.

Every function here blocks: call through a thread.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tamto_common.errors import DataCorruption
from tamto_protocol.batch import BATCH_SCHEMA, decode_batch
from tamto_protocol.segment import (
    FIRST_OFFSET_KEY,
    LAST_OFFSET_KEY,
    MAX_PUBLISH_KEY,
    MIN_PUBLISH_KEY,
    SEGMENT_SCHEMA,
    SEGMENT_SCHEMA_VERSION,
    UTC_US,
    SegmentEntry,
    parse_segment_name,
    segment_file_name,
)
from tamto_storage.durable import fsync_dir
from tamto_storage.model import StoredBatch

#: Rows per Parquet row group: reads by offset decode one group, not the whole file.
ROW_GROUP_ROWS = 16_384
TMP_SUFFIX = ".tmp"


@dataclass(frozen=True, slots=True)
class Segment:
    """A segment file of one partition, as storage keeps track of it."""

    entry: SegmentEntry
    path: Path

    @property
    def first_offset(self) -> int:
        return self.entry.first_offset

    @property
    def end_offset(self) -> int:
        return self.entry.end_offset


def build_table(batches: Sequence[StoredBatch]) -> pa.Table:
    """The segment table for contiguous `batches`, without touching single messages."""
    if not batches:
        raise ValueError("a segment needs at least one batch")
    records = [decode_batch(b.arrow_ipc) for b in batches]
    producer = pa.Table.from_batches(records, schema=BATCH_SCHEMA)
    first, end = batches[0].base_offset, batches[-1].end_offset
    if producer.num_rows != end - first:
        raise DataCorruption(
            f"batches for offsets {first}-{end - 1} hold {producer.num_rows} messages"
        )
    counts = np.fromiter((b.count for b in batches), dtype=np.int64, count=len(batches))
    times = np.fromiter((b.publish_time_us for b in batches), dtype=np.int64, count=len(batches))
    columns = {
        "offset": pa.array(np.arange(first, end, dtype=np.int64)),
        "publish_time": pa.array(np.repeat(times, counts)).cast(UTC_US),
        "event_time": producer.column("event_time"),
        "key": producer.column("key"),
        "payload": producer.column("payload"),
        "headers": producer.column("headers"),
        "id": producer.column("id"),
        "producer": producer.column("producer"),
    }
    metadata = {
        **(SEGMENT_SCHEMA.metadata or {}),
        FIRST_OFFSET_KEY: str(first).encode(),
        LAST_OFFSET_KEY: str(end - 1).encode(),
        MIN_PUBLISH_KEY: str(int(times.min())).encode(),
        MAX_PUBLISH_KEY: str(int(times.max())).encode(),
    }
    return pa.Table.from_pydict(columns, schema=SEGMENT_SCHEMA.with_metadata(metadata))


def write_segment(partition: int, directory: Path, batches: Sequence[StoredBatch]) -> Segment:
    """Write the segment for `batches` into `directory`: temporary file, fsync, rename."""
    table = build_table(batches)
    first, last = batches[0].base_offset, batches[-1].end_offset - 1
    path = directory / segment_file_name(first, last)
    tmp = directory / f".{path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
    try:
        with tmp.open("wb") as f:
            pq.write_table(table, f, row_group_size=ROW_GROUP_ROWS, compression="zstd")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(directory)
    return Segment(_entry(partition, table.schema.metadata, path.stat().st_size), path)


def _entry(partition: int, metadata: dict[bytes, bytes], size: int) -> SegmentEntry:
    first = int(metadata[FIRST_OFFSET_KEY])
    last = int(metadata[LAST_OFFSET_KEY])
    return SegmentEntry(
        partition=partition,
        first_offset=first,
        last_offset=last,
        rows=last - first + 1,
        size_bytes=size,
        min_publish_time_us=int(metadata[MIN_PUBLISH_KEY]),
        max_publish_time_us=int(metadata[MAX_PUBLISH_KEY]),
        schema_version=SEGMENT_SCHEMA_VERSION,
    )


def load_segment(partition: int, path: Path) -> Segment:
    """Describe an existing segment file from its footer alone."""
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataCorruption(f"segment {path} cannot be read: {exc}") from exc
    kv = meta.metadata or {}
    named = parse_segment_name(path.name)
    try:
        first, last = int(kv[FIRST_OFFSET_KEY]), int(kv[LAST_OFFSET_KEY])
    except (KeyError, ValueError):
        raise DataCorruption(f"segment {path} lacks its offset metadata") from None
    if named != (first, last) or meta.num_rows != last - first + 1:
        raise DataCorruption(
            f"segment {path} holds offsets {first}-{last} in {meta.num_rows} rows; "
            "its name and contents disagree"
        )
    entry = _entry(partition, kv, path.stat().st_size)
    return Segment(entry, path)


def scan_segments(partition: int, directory: Path) -> list[Segment]:
    """Every segment file in a partition directory, by offset; leftover temp files removed."""
    found = []
    if not directory.is_dir():
        return []
    for path in directory.iterdir():
        if path.name.startswith(".segment-") and path.name.endswith(TMP_SUFFIX):
            path.unlink()  # a seal a crash interrupted; it was never visible
            continue
        if parse_segment_name(path.name) is not None:
            found.append(load_segment(partition, path))
    return sorted(found, key=lambda s: s.first_offset)


def read_rows(path: Path, from_offset: int, max_messages: int, max_bytes: int) -> pa.Table:
    """Rows of a segment from `from_offset` on, within the limits (at least one row).

    Only row groups whose offset statistics reach `from_offset` are decoded.
    """
    parquet = pq.ParquetFile(path)
    offset_column = parquet.schema_arrow.get_field_index("offset")
    groups = []
    for i in range(parquet.metadata.num_row_groups):
        stats = parquet.metadata.row_group(i).column(offset_column).statistics
        if stats is not None and stats.has_min_max and stats.max < from_offset:
            continue
        groups.append(i)
    table = parquet.read_row_groups(groups) if groups else SEGMENT_SCHEMA.empty_table()
    table = table.filter(pc.greater_equal(table.column("offset"), from_offset))
    if max_messages:
        table = table.slice(0, max_messages)
    if table.num_rows > 1:
        sizes = pc.binary_length(table.column("payload")).to_numpy(zero_copy_only=False)
        within = int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right"))
        table = table.slice(0, max(within, 1))
    return table


def to_stored_batches(table: pa.Table) -> list[StoredBatch]:
    """Segment rows back as stored batches in the producer schema, one per publish time run."""
    if table.num_rows == 0:
        return []
    times = table.column("publish_time").cast(pa.int64()).to_numpy()
    starts = np.concatenate(([0], np.flatnonzero(np.diff(times)) + 1))
    ends = np.append(starts[1:], len(times))
    producer = table.select(BATCH_SCHEMA.names).cast(BATCH_SCHEMA)
    offsets = table.column("offset")
    batches = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        part = producer.slice(start, end - start).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, BATCH_SCHEMA) as writer:
            writer.write_table(part)
        batches.append(
            StoredBatch(
                base_offset=offsets[start].as_py(),
                count=end - start,
                publish_time_us=int(times[start]),
                arrow_ipc=sink.getvalue().to_pybytes(),
            )
        )
    return batches


def first_offset_at_or_after(path: Path, time_us: int) -> int | None:
    """The first offset in a segment published at or after `time_us`, if any."""
    table = pq.read_table(path, columns=["offset", "publish_time"])
    times = table.column("publish_time").cast(pa.int64()).to_numpy()
    hits = np.flatnonzero(times >= time_us)
    if not len(hits):
        return None
    return int(table.column("offset")[int(hits[0])].as_py())
