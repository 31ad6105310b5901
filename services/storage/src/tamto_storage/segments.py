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

Reading by offset (`read_rows`) decodes only the row groups a read needs,
one at a time until its limits are covered, keeping recently decoded groups
for the read that continues where this one stopped (`DecodedGroups`). Row
groups are therefore bounded by bytes as well as rows (`row_group_bounds`).

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
import os
import threading
from collections import OrderedDict
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


class DecodedGroups:
    """Recently decoded row groups, least recently used dropped first, within a byte budget.

    Reads of a backlog walk a partition by offset, so a read usually starts in
    the row group the previous read stopped in: keeping it spares decoding it
    again (with a segment of the old layout, one 64 MiB group per file, that is
    the whole file at every read). Keys are the file's identity (device, inode,
    size, mtime), not its name: a promoted rewrite replaces a file under the
    same name. Shared by the reading threads, hence the lock.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._groups: OrderedDict[tuple[int, ...], pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[int, ...]) -> pa.Table | None:
        with self._lock:
            table = self._groups.get(key)
            if table is not None:
                self._groups.move_to_end(key)
            return table

    def put(self, key: tuple[int, ...], table: pa.Table) -> None:
        size = table.nbytes
        if size > self._max_bytes:
            return
        with self._lock:
            old = self._groups.pop(key, None)
            self._bytes -= 0 if old is None else old.nbytes
            while self._groups and self._bytes + size > self._max_bytes:
                self._bytes -= self._groups.popitem(last=False)[1].nbytes
            self._groups[key] = table
            self._bytes += size


def read_rows(
    path: Path,
    from_offset: int,
    max_messages: int,
    max_bytes: int,
    cache: DecodedGroups | None = None,
) -> pa.Table:
    """Rows of a segment from `from_offset` on, within the limits (at least one row).

    Decodes row groups one at a time, from the first whose offset statistics
    reach `from_offset`, and stops as soon as the limits are covered: the
    result is the prefix the whole file would give, from the groups it needs.
    `max_messages` 0 means no message limit; `max_bytes` counts payload bytes.
    """
    with path.open("rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        parquet = pq.ParquetFile(f, page_checksum_verification=True)
        parts: list[pa.Table] = []
        rows = size = 0
        for i in groups_from(parquet.metadata, from_offset):
            group = _rows_from(_decode_group(parquet, i, (*identity, i), cache), from_offset)
            parts.append(group)
            rows += group.num_rows
            size += _payload_bytes(group)
            if (max_messages and rows >= max_messages) or size > max_bytes:
                break  # later rows cannot be part of this read
    table = pa.concat_tables(parts) if parts else SEGMENT_SCHEMA.empty_table()
    return _within(table, max_messages, max_bytes)


def groups_from(metadata: pq.FileMetaData, from_offset: int) -> list[int]:
    """The row groups that can hold offsets at or after `from_offset`, in file order.

    Offsets ascend through a segment, so that is every group from the first
    whose maximum reaches `from_offset`; a group without statistics is kept.
    """
    column = metadata.schema.to_arrow_schema().get_field_index("offset")
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max or stats.max >= from_offset:
            return list(range(i, metadata.num_row_groups))
    return []


def _decode_group(
    parquet: pq.ParquetFile, index: int, key: tuple[int, ...], cache: DecodedGroups | None
) -> pa.Table:
    table = cache.get(key) if cache is not None else None
    if table is None:
        # One column dominates (payload): Arrow's pool threads would add
        # contention, not speed, on top of the read's own worker thread.
        table = parquet.read_row_group(index, use_threads=False)
        if cache is not None:
            cache.put(key, table)
    return table


def _rows_from(group: pa.Table, from_offset: int) -> pa.Table:
    """The rows of a row group at or after `from_offset` (offsets ascend: a slice, no copy)."""
    offsets = int_values(group.column("offset"))
    start = int(np.searchsorted(offsets, from_offset, side="left"))
    return group.slice(start)


def _payload_bytes(table: pa.Table) -> int:
    return int(pc.sum(pc.binary_length(table.column("payload"))).as_py() or 0)


def _within(table: pa.Table, max_messages: int, max_bytes: int) -> pa.Table:
    """The first rows of `table` within the limits, at least one."""
    if max_messages:
        table = table.slice(0, max_messages)
    if table.num_rows > 1:
        sizes = int_values(pc.binary_length(table.column("payload")))
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
    times = int_values(table.column("publish_time").cast(pa.int64()))
    starts = run_starts(table)
    ends = np.append(starts[1:], table.num_rows)
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
    # ParquetFile, not pq.read_table: that goes through pyarrow.dataset, whose first use
    # imports pandas (~4 s on a loaded 2-core machine), stalling a router's first takeover.
    with pq.ParquetFile(path, page_checksum_verification=True) as segment:
        table = segment.read(columns=["offset", "publish_time"])
    times = int_values(table.column("publish_time").cast(pa.int64()))
    hits = np.flatnonzero(times >= time_us)
    if not len(hits):
        return None
    return int(table.column("offset")[int(hits[0])].as_py())
