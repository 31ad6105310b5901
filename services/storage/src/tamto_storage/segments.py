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

Reading by offset is `tamto_storage.segment_reads`'s, which decodes only the
row groups a read needs: row groups are therefore bounded by bytes as well as
rows (`row_group_bounds`).

Interest retention rewrites segments with only the messages still needed
(`tamto_storage.carry`); such a segment keeps the range it covers but has
fewer rows, and `scan_segments` returns every version found so `choose_live`
can tell which one counts.

Integrity (`tamto_storage.integrity`): every data page is written with its
Parquet CRC and verified on every decode; the whole file's digest goes into
its manifest entry. A file whose footer cannot be read at load is kept in the
log as a damaged `Segment` covering the range its name gives, so the other
segments stay readable and reads of that range get DATA_LOSS.

Every function here blocks: call through a thread.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tamto_common.durable import write_atomic
from tamto_common.errors import DataLoss
from tamto_protocol.batch import (
    BATCH_SCHEMA,
    decode_batch,
    int64_array,
    int64_scalar,
    int_values,
)
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
from tamto_storage.integrity import DigestingSink
from tamto_storage.model import StoredBatch

#: A Parquet row group ends at whichever limit comes first (see `row_group_bounds`).
#: Reads by offset decode whole groups and return at most 8 MiB (storage's
#: ``--read-max-bytes``), so groups about that size let a read decode little more
#: than it returns; by rows alone, a 64 MiB segment of 10 KiB messages was one
#: group, decoded whole by each of its ~8 reads. Spark and pyarrow read any size.
ROW_GROUP_ROWS = 16_384
ROW_GROUP_BYTES = 8 * 1024 * 1024
#: Bytes a row takes besides its variable-length columns (offset, times, lengths).
_ROW_FIXED_BYTES = 40
TMP_SUFFIX = ".tmp"


@dataclass(frozen=True, slots=True)
class Segment:
    """A segment file of one partition, as storage keeps track of it."""

    entry: SegmentEntry
    path: Path
    #: Why the file cannot be served (found at load), or empty when it was not seen damaged.
    damage: str = ""

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
        raise DataLoss(f"batches for offsets {first}-{end - 1} hold {producer.num_rows} messages")
    counts = np.fromiter((b.count for b in batches), dtype=np.int64, count=len(batches))
    times = np.fromiter((b.publish_time_us for b in batches), dtype=np.int64, count=len(batches))
    columns = {
        "offset": int64_array(np.arange(first, end, dtype=np.int64)),
        "publish_time": int64_array(np.repeat(times, counts)).cast(UTC_US),
        "event_time": producer.column("event_time"),
        "key": producer.column("key"),
        "payload": producer.column("payload"),
        "headers": producer.column("headers"),
        "id": producer.column("id"),
        "producer": producer.column("producer"),
    }
    metadata = segment_metadata(first, end - 1, int(times.min()), int(times.max()))
    return pa.Table.from_pydict(columns, schema=SEGMENT_SCHEMA.with_metadata(metadata))


def segment_metadata(
    first: int, last: int, min_publish_us: int, max_publish_us: int, generation: int | None = None
) -> dict[bytes, bytes]:
    """A segment file's Parquet metadata: the schema's, then the offsets and publish times
    it covers and, for a file that replaces others (carried forward, a lost range), its
    generation."""
    metadata = {
        **(SEGMENT_SCHEMA.metadata or {}),
        FIRST_OFFSET_KEY: str(first).encode(),
        LAST_OFFSET_KEY: str(last).encode(),
        MIN_PUBLISH_KEY: str(min_publish_us).encode(),
        MAX_PUBLISH_KEY: str(max_publish_us).encode(),
    }
    if generation is not None:
        metadata[GENERATION_KEY] = str(generation).encode()
    return metadata


def write_segment(partition: int, directory: Path, batches: Sequence[StoredBatch]) -> Segment:
    """Write the segment for `batches` into `directory`: temporary file, fsync, rename."""
    table = build_table(batches)
    first, last = batches[0].base_offset, batches[-1].end_offset - 1
    path = directory / segment_file_name(first, last)
    digest = write_digested(path, table)
    size = path.stat().st_size
    return Segment(
        segment_entry(partition, table.schema.metadata, size, table.num_rows, digest=digest), path
    )


def write_digested(path: Path, table: pa.Table) -> str:
    """`write_parquet` to `path` atomically; returns the file's digest, taken while writing."""
    digests: list[str] = []

    def write(f: BinaryIO) -> None:
        sink = DigestingSink(f)
        write_parquet(table, sink)  # type: ignore[arg-type]  # file-like enough for Arrow
        digests.append(sink.digest)

    write_atomic(path, write)
    return digests[-1]


def row_group_bounds(table: pa.Table) -> list[tuple[int, int]]:
    """(start, stop) rows of each row group of a segment table.

    A group holds at most `ROW_GROUP_ROWS` rows and about `ROW_GROUP_BYTES`
    uncompressed, and ends where a stored batch ends whenever one fits: a batch
    read back is then a slice of one decoded group, not a copy joining two. A
    batch larger than the limits is split; one row larger than them is a group
    of its own. An empty table is one empty group, as `pq.write_table` writes.
    """
    n = table.num_rows
    ends = np.cumsum(_row_sizes(table))
    batch_ends = np.append(run_starts(table)[1:], n)
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < n or not bounds:
        before = int(ends[start - 1]) if start else 0
        fits = int(np.searchsorted(ends, before + ROW_GROUP_BYTES, side="right"))
        fits = min(max(fits, start + 1), start + ROW_GROUP_ROWS, n)
        last = int(np.searchsorted(batch_ends, fits, side="right")) - 1
        stop = int(batch_ends[last]) if last >= 0 and batch_ends[last] > start else fits
        bounds.append((start, stop))
        start = stop
    return bounds


def run_starts(table: pa.Table) -> npt.NDArray[np.int64]:
    """The rows where a stored batch starts: the first, and every row whose publish
    time differs from the previous row's or whose offset does not follow it (a
    carried-forward segment has gaps, and a stored batch is contiguous)."""
    times = int_values(table.column("publish_time").cast(pa.int64()))
    offsets = int_values(table.column("offset"))
    breaks = (np.diff(times) != 0) | (np.diff(offsets) != 1)
    return np.concatenate(([0], np.flatnonzero(breaks) + 1)).astype(np.int64)


def _row_sizes(table: pa.Table) -> npt.NDArray[np.int64]:
    """About how many bytes each row takes uncompressed (headers left out: small)."""
    sizes = _ROW_FIXED_BYTES + _lengths(table.column("payload"))
    return sizes + _lengths(table.column("key")) + _lengths(table.column("id"))


def _lengths(column: pa.ChunkedArray) -> npt.NDArray[np.int64]:
    """Byte length of each value of a binary or string column (0 for null)."""
    lengths = pc.fill_null(pc.binary_length(column).cast(pa.int64()), int64_scalar(0))
    return int_values(lengths)


#: Columns written without a dictionary (see `write_parquet`).
_PLAIN_COLUMNS = frozenset({"payload", "offset", "id"})


def write_parquet(table: pa.Table, sink: BinaryIO) -> None:
    """Write a segment table as Parquet (zstd), in row groups of `row_group_bounds`.

    Each `write_table` call of a `ParquetWriter` closes its own row groups, so
    one call per group gives exactly these groups; the same table always gives
    the same bytes. The columns whose values repeat (publish times, keys,
    headers, producer names) are dictionary-encoded. `_PLAIN_COLUMNS` are
    written PLAIN: their values are (nearly) all distinct, so a dictionary holds
    every value once more, or fills up and falls back to PLAIN. For payloads that made
    reading random 10 KiB payloads about twice as slow and writing them 1.4x
    slower, for no smaller file (zstd finds repeated payloads anyway). For
    offsets and ids (unique: dedup keeps one message per id) a dictionary took a
    fifth of a 64 MiB segment's write CPU at 100 B and made the file 3% larger.
    Any Parquet reader (Spark, pyarrow) reads both encodings. Every page carries
    its CRC (`tamto_storage.integrity`).
    """
    dictionary = [
        path for path in _leaf_paths(table.schema.remove_metadata()) if path not in _PLAIN_COLUMNS
    ]
    with pq.ParquetWriter(
        sink,
        table.schema,
        compression="zstd",
        use_dictionary=dictionary,
        write_page_checksum=True,
    ) as writer:
        for start, stop in row_group_bounds(table):
            writer.write_table(table.slice(start, stop - start), row_group_size=ROW_GROUP_ROWS)


@functools.lru_cache(maxsize=4)  # one schema in practice (called without metadata)
def _leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """The Parquet column paths of `schema` (``headers.key_value.key``, ...), which
    is how the writer's per-column options name nested columns."""
    sink = pa.BufferOutputStream()
    pq.write_metadata(schema, sink)
    parquet_schema = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    return tuple(parquet_schema.column(i).path for i in range(len(parquet_schema)))


def segment_entry(
    partition: int,
    metadata: dict[bytes, bytes],
    size: int,
    rows: int,
    *,
    staged: bool = False,
    digest: str = "",
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
        digest=digest,
    )


def load_segment(partition: int, path: Path, *, staged: bool = False) -> Segment:
    """Describe an existing segment file from its footer alone.

    `staged`: the file is a carried-forward segment under ``_carried/``.
    """
    try:
        meta = pq.read_metadata(path)
    except (OSError, ValueError, pa.ArrowException) as exc:  # a damaged footer: bad UTF-8 too
        raise DataLoss(f"segment {path} cannot be read: {exc}") from exc
    kv = meta.metadata or {}
    try:
        first, last = int(kv[FIRST_OFFSET_KEY]), int(kv[LAST_OFFSET_KEY])
        generation = int(kv.get(GENERATION_KEY, b"0"))
    except (KeyError, ValueError):
        raise DataLoss(f"segment {path} lacks its offset metadata") from None
    named = parse_carried_name(path.name) if staged else parse_segment_name(path.name)
    expected = (first, last, generation) if staged else (first, last)
    # A sealed segment holds its whole range; a carried-forward one at most that.
    span = last - first + 1
    rows_fit = meta.num_rows <= span if generation else meta.num_rows == span
    if named != expected or not rows_fit:
        raise DataLoss(
            f"segment {path} holds offsets {first}-{last} (generation {generation}) in "
            f"{meta.num_rows} rows; its name and contents disagree"
        )
    try:
        entry = segment_entry(partition, kv, path.stat().st_size, meta.num_rows, staged=staged)
    except (KeyError, ValueError):
        raise DataLoss(f"segment {path} lacks its publish time metadata") from None
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
                try:
                    found.append(load_segment(partition, path, staged=staged))
                except DataLoss as exc:
                    found.append(damaged_segment(partition, path, str(exc), staged=staged))
    return sorted(found, key=lambda s: (s.first_offset, s.last_offset, s.generation))


def damaged_segment(partition: int, path: Path, damage: str, *, staged: bool = False) -> Segment:
    """A segment whose file cannot be read, covering the range its name gives.

    It takes its place in the log so that only its range is lost: reads there
    get DATA_LOSS, reads elsewhere go on. Its generation comes from the name
    (a plain name: 0, which is all a damaged file can claim).
    """
    carried = parse_carried_name(path.name) if staged else None
    plain = parse_segment_name(path.name)
    first, last = carried[:2] if carried else plain or (0, -1)
    entry = SegmentEntry(
        partition=partition,
        first_offset=first,
        last_offset=last,
        rows=last - first + 1,
        size_bytes=path.stat().st_size,
        min_publish_time_us=0,
        max_publish_time_us=0,
        generation=carried[2] if carried else 0,
        staged=staged,
    )
    return Segment(entry, path, damage=damage)


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
