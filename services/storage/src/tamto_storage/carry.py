"""Carrying messages forward: rewriting segments with only the rows still needed.

A rewrite reads the needed rows of a run of consecutive segments (only the
row groups whose offset statistics reach them), and writes them, unchanged
(offsets, keys, headers, publish and event times), into one new segment that
covers the run's whole offset range. The new file is generation
``max(member generations) + 1`` and is first written under
``partition=<p>/_carried/`` (temporary file, fsync, rename, fsync of the
directory), where a plain ``spark.read.parquet`` listing does not see it: the
files it replaces stay visible, unchanged, for their grace period, so a
listing never holds a message twice. `promote` later gives it the plain name.

Every function here blocks: call through a thread.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tamto_common.durable import fsync_dir, make_dirs
from tamto_protocol.batch import int64_array, int_values
from tamto_protocol.segment import (
    CARRIED_DIR,
    SEGMENT_SCHEMA,
    carried_file_name,
    segment_file_name,
)
from tamto_storage.interest import Rewrite, Span
from tamto_storage.segments import (
    TMP_SUFFIX,
    Segment,
    segment_entry,
    segment_metadata,
    write_digested,
)


def offsets_of(segment: Segment) -> npt.NDArray[np.int64]:
    """The offsets a segment holds, sorted (read from the offset column alone)."""
    if segment.complete:
        return np.arange(segment.first_offset, segment.end_offset, dtype=np.int64)
    table = pq.read_table(segment.path, columns=["offset"], page_checksum_verification=True)
    return int_values(table.column("offset"))


def _in_spans(offsets: npt.NDArray[np.int64], spans: Sequence[Span]) -> npt.NDArray[np.bool_]:
    """Which of the sorted `offsets` fall in `spans` (sorted, disjoint): one pass, no loop
    over rows, however many spans."""
    starts = np.searchsorted(offsets, [s for s, _ in spans], side="left")
    ends = np.searchsorted(offsets, [e for _, e in spans], side="left")
    marks = np.zeros(len(offsets) + 1, dtype=np.int64)
    np.add.at(marks, starts, 1)
    np.add.at(marks, ends, -1)
    inside: npt.NDArray[np.bool_] = np.cumsum(marks[:-1]) > 0
    return inside


def needed_rows(segment: Segment, keep: Sequence[Span], path: Path | None = None) -> pa.Table:
    """The rows of `segment` whose offsets are in `keep`, decoding only row groups that
    can hold them; `path`: where its bytes are (its own file when None)."""
    spans = [(max(s, segment.first_offset), min(e, segment.end_offset)) for s, e in keep]
    spans = [(s, e) for s, e in spans if s < e]
    if not spans:
        return SEGMENT_SCHEMA.empty_table()
    # Page CRCs checked: a damaged page must not be carried forward as if whole.
    parquet = pq.ParquetFile(path or segment.path, page_checksum_verification=True)
    column = parquet.schema_arrow.get_field_index("offset")
    groups = []
    for i in range(parquet.metadata.num_row_groups):
        stats = parquet.metadata.row_group(i).column(column).statistics
        unknown = stats is None or not stats.has_min_max
        if unknown or any(s <= stats.max and stats.min < e for s, e in spans):
            groups.append(i)
    if not groups:
        return SEGMENT_SCHEMA.empty_table()
    table = parquet.read_row_groups(groups)
    offsets = int_values(table.column("offset"))
    return table.take(int64_array(np.flatnonzero(_in_spans(offsets, spans))))


def write_carried(
    partition: int,
    directory: Path,
    rewrite: Rewrite,
    locate: Callable[[Segment], Path] = lambda segment: segment.path,
) -> Segment:
    """Write the segment that replaces `rewrite.members`, under ``_carried/``; returns it.
    `locate` gives a file with a member's bytes (a copy from the segment store when
    its local file was reclaimed: `SegmentLog.local_path`)."""
    members = rewrite.members
    generation = max(m.generation for m in members) + 1
    parts = [needed_rows(m, rewrite.keep, locate(m)) for m in members]
    table = pa.concat_tables([p.replace_schema_metadata(None) for p in parts])
    first, last = rewrite.first_offset, rewrite.last_offset
    if table.num_rows:
        times = table.column("publish_time").cast(pa.int64())
        low, high = pc.min(times).as_py(), pc.max(times).as_py()
    else:
        # Nothing left: time retention still sees the newest message the range held.
        low = high = max(m.entry.max_publish_time_us for m in members)
    metadata = segment_metadata(first, last, low, high, generation)
    table = table.cast(SEGMENT_SCHEMA).replace_schema_metadata(metadata)
    folder = directory / CARRIED_DIR
    make_dirs(folder)
    path = folder / carried_file_name(first, last, generation)
    digest = write_digested(path, table)
    size = path.stat().st_size
    entry = segment_entry(partition, metadata, size, table.num_rows, staged=True, digest=digest)
    return Segment(entry, path)


def promote(directory: Path, segment: Segment) -> Segment:
    """Give a staged (``_carried/``) segment its plain name, visible to a plain read.

    The plain name is a hard link to the same file, made under a temporary
    name and renamed into place, so it appears whole and at once (replacing a
    same-named file it supersedes, whose grace period is over). The
    ``_carried/`` name stays for readers of manifest versions that named it.
    """
    path = directory / segment_file_name(segment.first_offset, segment.last_offset)
    tmp = directory / f".{path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
    os.link(segment.path, tmp)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(directory)
    return Segment(replace(segment.entry, staged=False), path)
