"""Reading Tamto segments with pyarrow: the part of the data source that runs on executors.

Plain functions over files, with no Spark in them, so they are easy to test
and cheap to ship to Python workers. A `SegmentSlice` names one segment file
(in a data directory or the segment store, `tamto_spark.location`) and the
offset/time range wanted from it; the driver plans slices from one manifest
snapshot (`plan_slices`), executors read them (`read_slice`). An executor reads
a segment whole and checks its size and digest against the manifest entry
before decoding it: a truncated or corrupt object fails the task with
DATA_LOSS naming it (`SegmentDamaged`), never as good rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tamto_protocol.segment import SEGMENT_SCHEMA, Manifest, bytes_digest
from tamto_spark.location import child, open_location, read_stream_manifest, shown

#: The schema of a Tamto DataFrame: `partition`, then the segment columns (all
#: nullable, as Spark declares the columns of a DDL schema).
OUTPUT_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32()),
        *(pa.field(f.name, f.type) for f in SEGMENT_SCHEMA),
    ]
)

#: The same as a Spark DDL string.
SPARK_DDL = (
    "partition int, offset bigint, publish_time timestamp, event_time timestamp, "
    "key binary, payload binary, headers map<string,string>, id string, producer string"
)


class SegmentMissing(FileNotFoundError):
    """A planned segment file is gone: retention deleted it after its grace period."""


class SegmentDamaged(OSError):
    """A planned segment's bytes differ from its manifest entry (size or digest)."""


@dataclass(frozen=True, slots=True)
class Range:
    """What to read: per-partition offset bounds and an optional publish-time window.

    Offsets: `start` inclusive, `end` exclusive, per partition (absent: unbounded).
    Times: microseconds since the epoch, `start_time_us` inclusive, `end_time_us` exclusive.
    """

    start: Mapping[int, int]
    end: Mapping[int, int]
    start_time_us: int | None = None
    end_time_us: int | None = None


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """One segment file and the part of it to read."""

    path: str  # a local path or a URI (`tamto_spark.location`)
    partition: int
    from_offset: int  # inclusive
    to_offset: int  # exclusive
    start_time_us: int | None = None
    end_time_us: int | None = None
    size: int = 0  # the manifest's, checked on read (0: unknown)
    digest: str = ""  # the manifest's, checked on read (empty: none recorded)


def plan_slices(stream_dir: Path | str, manifest: Manifest, wanted: Range) -> list[SegmentSlice]:
    """The slices of the committed segments of `manifest` that `wanted` covers;
    `stream_dir` is the stream's location (a local path or a URI)."""
    slices = []
    for entry in sorted(manifest.segments, key=lambda s: (s.partition, s.first_offset)):
        lo = max(entry.first_offset, wanted.start.get(entry.partition, 0))
        hi = min(entry.end_offset, wanted.end.get(entry.partition, entry.end_offset))
        if lo >= hi:
            continue
        if wanted.start_time_us is not None and entry.max_publish_time_us < wanted.start_time_us:
            continue
        if wanted.end_time_us is not None and entry.min_publish_time_us >= wanted.end_time_us:
            continue
        slices.append(
            SegmentSlice(
                child(str(stream_dir), entry.file),
                entry.partition,
                lo,
                hi,
                wanted.start_time_us,
                wanted.end_time_us,
                entry.size_bytes,
                entry.digest,
            )
        )
    return slices


def read_slice(part: SegmentSlice) -> Iterator[pa.RecordBatch]:
    """The rows of a slice as record batches in `OUTPUT_SCHEMA`, filtered vectorised."""
    parquet = pq.ParquetFile(pa.BufferReader(checked_bytes(part)), page_checksum_verification=True)
    for batch in parquet.iter_batches(batch_size=65_536):
        offsets = batch.column("offset")
        mask = pc.and_(
            pc.greater_equal(offsets, part.from_offset), pc.less(offsets, part.to_offset)
        )
        times = batch.column("publish_time")
        if part.start_time_us is not None:
            start = pa.scalar(part.start_time_us, pa.int64()).cast(times.type)
            mask = pc.and_(mask, pc.greater_equal(times, start))
        if part.end_time_us is not None:
            end = pa.scalar(part.end_time_us, pa.int64()).cast(times.type)
            mask = pc.and_(mask, pc.less(times, end))
        selected = batch.filter(mask)
        if selected.num_rows == 0:
            continue
        partition = pa.array(np.full(selected.num_rows, part.partition, dtype=np.int32))
        yield pa.RecordBatch.from_arrays([partition, *selected.columns], schema=OUTPUT_SCHEMA)


def checked_bytes(part: SegmentSlice) -> bytes:
    """The slice's whole segment, once its size and digest match its manifest entry."""
    filesystem, path = open_location(part.path)
    try:
        with filesystem.open_input_file(path) as f:
            data = bytes(f.read())
    except FileNotFoundError as exc:
        raise SegmentMissing(
            f"segment {shown(part.path)} was deleted (retention) before this job read it; "
            "raise the storage --retention-grace-ms or read a newer range"
        ) from exc
    where = shown(part.path)
    if part.size and len(data) != part.size:
        raise SegmentDamaged(
            f"DATA_LOSS: segment {where} is {len(data)} bytes; the manifest says {part.size} "
            "(truncated or replaced): not read"
        )
    if part.digest and bytes_digest(data) != part.digest:
        raise SegmentDamaged(
            f"DATA_LOSS: segment {where} has digest {bytes_digest(data)}; the manifest says "
            f"{part.digest} (corrupt): not read"
        )
    return data


def read_table(location: str, wanted: Range | None = None) -> pa.Table:
    """The rows at `location` that `wanted` covers (default: all), planned from one
    manifest snapshot and read as the data source's executors read them, without
    Spark (tests and small tools)."""
    manifest = read_stream_manifest(location)
    parts = plan_slices(location, manifest, wanted or Range({}, {}))
    batches = [batch for part in parts for batch in read_slice(part)]
    return pa.Table.from_batches(batches, schema=OUTPUT_SCHEMA)
