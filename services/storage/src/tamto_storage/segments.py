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

Interest retention rewrites segments with only the messages still needed
(`tamto_storage.carry`); such a segment keeps the range it covers but has
fewer rows, and `scan_segments` returns every version found so `choose_live`
can tell which one counts.

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
    CARRIED_DIR,
    FIRST_OFFSET_KEY,
    GENERATION_KEY,
    LAST_OFFSET_KEY,
    MAX_PUBLISH_KEY,
    MIN_PUBLISH_KEY,
    SEGMENT_SCHEMA,
    SEGMENT_SCHEMA_VERSION,
    UTC_US,
    SegmentEntry,
    parse_carried_name,
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

    @property
    def last_offset(self) -> int:
        return self.entry.last_offset

    @property
    def generation(self) -> int:
        return self.entry.generation

    @property
    def complete(self) -> bool:
        """Whether it holds every offset of its range (no message was carried away)."""
        return self.entry.rows == self.entry.end_offset - self.entry.first_offset


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
    return Segment(
        segment_entry(partition, table.schema.metadata, path.stat().st_size, table.num_rows), path
    )


def segment_entry(
    partition: int, metadata: dict[bytes, bytes], size: int, rows: int, *, staged: bool = False
) -> SegmentEntry:
    """The manifest entry of a segment file with this footer metadata, size and row count."""
    first = int(metadata[FIRST_OFFSET_KEY])
    last = int(metadata[LAST_OFFSET_KEY])
    return SegmentEntry(
        partition=partition,
        first_offset=first,
        last_offset=last,
        rows=rows,
        size_bytes=size,
        min_publish_time_us=int(metadata[MIN_PUBLISH_KEY]),
        max_publish_time_us=int(metadata[MAX_PUBLISH_KEY]),
        schema_version=SEGMENT_SCHEMA_VERSION,
        generation=int(metadata.get(GENERATION_KEY, b"0")),
        staged=staged,
    )


def load_segment(partition: int, path: Path, *, staged: bool = False) -> Segment:
    """Describe an existing segment file from its footer alone.

    `staged`: the file is a carried-forward segment under ``_carried/``.
    """
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataCorruption(f"segment {path} cannot be read: {exc}") from exc
    kv = meta.metadata or {}
    try:
        first, last = int(kv[FIRST_OFFSET_KEY]), int(kv[LAST_OFFSET_KEY])
        generation = int(kv.get(GENERATION_KEY, b"0"))
    except (KeyError, ValueError):
        raise DataCorruption(f"segment {path} lacks its offset metadata") from None
    named = parse_carried_name(path.name) if staged else parse_segment_name(path.name)
    expected = (first, last, generation) if staged else (first, last)
    # A sealed segment holds its whole range; a carried-forward one at most that.
    span = last - first + 1
    rows_fit = meta.num_rows <= span if generation else meta.num_rows == span
    if named != expected or not rows_fit:
        raise DataCorruption(
            f"segment {path} holds offsets {first}-{last} (generation {generation}) in "
            f"{meta.num_rows} rows; its name and contents disagree"
        )
    entry = segment_entry(partition, kv, path.stat().st_size, meta.num_rows, staged=staged)
    return Segment(entry, path)


def scan_segments(partition: int, directory: Path) -> list[Segment]:
    """Every segment file of a partition directory and its ``_carried/``, by offset.

    Several versions of a range can be present (a carried-forward segment and
    the files it replaced, during their grace period); `choose_live` picks.
    Temporary files a crash left behind are removed: they were never visible.
    """
    found = []
    for folder, staged in ((directory, False), (directory / CARRIED_DIR, True)):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.name.startswith(".segment-") and path.name.endswith(TMP_SUFFIX):
                path.unlink()  # a seal or rewrite a crash interrupted; never visible
                continue
            parse = parse_carried_name if staged else parse_segment_name
            if parse(path.name) is not None:
                found.append(load_segment(partition, path, staged=staged))
    return sorted(found, key=lambda s: (s.first_offset, s.last_offset, s.generation))


def choose_live(found: Sequence[Segment]) -> tuple[list[Segment], list[Segment]]:
    """Split the segment files found on disk into (live, superseded).

    A rewrite only ever covers whole segments and gets a higher generation than
    each of them, so a file is superseded by another whose range contains its
    own with a higher generation; at equal generation the plain (promoted)
    copy supersedes the ``_carried/`` one it was linked from.
    """

    def beats(a: Segment, b: Segment) -> bool:
        contains = a.first_offset <= b.first_offset and b.last_offset <= a.last_offset
        if not contains or a is b:
            return False
        return a.generation > b.generation or (
            a.generation == b.generation and not a.entry.staged and b.entry.staged
        )

    rewritten = [s for s in found if s.generation > 0]  # only these can supersede
    live: list[Segment] = []
    superseded: list[Segment] = []
    for segment in found:
        if any(beats(other, segment) for other in rewritten):
            superseded.append(segment)
        else:
            live.append(segment)
    return live, superseded


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
    """Segment rows back as stored batches in the producer schema.

    One batch per run of rows with one publish time and consecutive offsets (a
    carried-forward segment has gaps, and a stored batch is contiguous).
    """
    if table.num_rows == 0:
        return []
    times = table.column("publish_time").cast(pa.int64()).to_numpy()
    offset_values = table.column("offset").to_numpy()
    breaks = (np.diff(times) != 0) | (np.diff(offset_values) != 1)
    starts = np.concatenate(([0], np.flatnonzero(breaks) + 1))
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
