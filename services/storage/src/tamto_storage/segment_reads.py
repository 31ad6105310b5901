"""Reading segments back by offset: row groups decoded only as far as a read needs,
recently decoded groups kept for the read that continues (`DecodedGroups`), and rows
turned back into stored batches.

Reading by offset (`read_rows`) decodes only the row groups a read needs,
one at a time until its limits are covered, keeping recently decoded groups
for the read that continues where this one stopped. Row groups are bounded by
bytes as well as rows when written (`tamto_storage.segments.row_group_bounds`),
so a read decodes little more than it returns. Every page decoded is checked
against its CRC (`tamto_storage.integrity`).

Every function here blocks: call through a thread.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tamto_protocol.batch import BATCH_SCHEMA, int_values
from tamto_protocol.segment import SEGMENT_SCHEMA
from tamto_storage.model import StoredBatch
from tamto_storage.segments import run_starts


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
