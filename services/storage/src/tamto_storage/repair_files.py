"""What every repair of a partition's files shares: keeping a damaged file aside as
evidence, recording a lost range, and where the sealed log ends.

Used by `tamto storage repair` (`tamto_storage.scrub`, `tamto_storage.wal_repair`)
and by the online repair from a healthy replica (`tamto_storage.replica_repair`).
A lost range is an empty segment covering it, recorded in the manifest: the
range stays part of the log (its offsets are never reused) and reads step over
it, as over messages interest retention removed. Blocking: call through a thread.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from tamto_common.durable import fsync_dir, make_dirs
from tamto_protocol.segment import (
    SEGMENT_SCHEMA,
    Manifest,
    SegmentEntry,
    partition_dir_name,
    segment_file_name,
)
from tamto_storage.manifest import newest_readable, rewrite
from tamto_storage.segments import (
    Segment,
    choose_live,
    load_segment,
    scan_segments,
    segment_metadata,
    write_digested,
)

#: Where repair moves damaged files, inside their partition (or stream) directory.
DAMAGED_DIR = "_damaged"


def move_aside(path: Path, folder: Path) -> Path:
    """Move a damaged file into `folder` (kept as evidence), durably. A file of the
    same name already there (an earlier repair's) is kept: the new one gets a suffix."""
    make_dirs(folder)
    target = folder / path.name
    n = 1
    while target.exists():
        target = folder / f"{path.name}.{n}"
        n += 1
    os.replace(path, target)
    fsync_dir(path.parent)
    fsync_dir(folder)
    return target


def write_lost_range(
    stream_dir: Path, number: int, first: int, last: int, generation: int, publish_time_us: int
) -> None:
    """An empty segment covering `first`..`last` in generation `generation`, recorded in
    the manifest in place of the entries of files in that range that are gone (moved
    aside, or missing): the range stays part of the log, and reads step over it."""
    metadata = segment_metadata(first, last, publish_time_us, publish_time_us, generation)
    pdir = stream_dir / partition_dir_name(number)
    make_dirs(pdir)
    path = pdir / segment_file_name(first, last)
    digest = write_digested(path, SEGMENT_SCHEMA.empty_table().replace_schema_metadata(metadata))
    record_segment(
        stream_dir, Segment(replace(load_segment(number, path).entry, digest=digest), path)
    )


def with_entry(manifest: Manifest, entry: SegmentEntry) -> Manifest:
    """`manifest` with `entry` in place of any entry of the same file."""
    others = tuple(s for s in manifest.segments if s.file != entry.file)
    return replace(manifest, segments=(*others, entry))


def record_segment(stream_dir: Path, segment: Segment) -> None:
    """Put `segment` in the manifest in place of any entry of the same file."""
    rewrite(stream_dir, lambda manifest: with_entry(manifest, segment.entry))


def live_segments(stream_dir: Path, number: int, pdir: Path) -> list[Segment]:
    """The partition's live segment files at or above its retention floor, by offset."""
    manifest, _ = newest_readable(stream_dir)
    floor = manifest.start_offsets.get(number, 0)
    live, _ = choose_live(scan_segments(number, pdir))
    return [s for s in live if s.first_offset >= floor]


def sealed_end(stream_dir: Path, number: int, pdir: Path) -> int:
    """Where the partition's sealed log ends: its last live segment's end, or its floor."""
    manifest, _ = newest_readable(stream_dir)
    floor = manifest.start_offsets.get(number, 0)
    return max([floor, *(s.end_offset for s in live_segments(stream_dir, number, pdir))])
