"""`tamto storage verify` and `tamto storage repair`: scrubbing a node's files, and
returning damaged partitions to service with the loss recorded.

Both work on a storage data directory while its storage node is stopped (they
read and write the files a running node holds open), and block: the CLI runs
them as they are.

`verify` checks every file storage keeps, the way storage itself would: every
manifest version (JSON and checksum), every segment (footer, the manifest's
file digest, every page's CRC by decoding it all), every WAL file (every
frame's CRC and offsets, as recovery does, without truncating anything), every
cursor and the epoch (their checksums). Each problem is a `Finding` naming the
file and, where it holds messages, the offsets it covers.

`repair` deals with each finding so that storage serves the partition again:

- a damaged segment moves to ``partition=<p>/_damaged/`` and an empty segment
  of the next generation takes its name, covering the same range: reads step
  over the lost offsets, as over messages interest retention removed;
- a damaged WAL frame: what precedes it is sealed into a segment, the lost
  offsets become an empty segment (to the next valid frame found, or the
  damaged frame's own count when its header still checks out), the valid
  frames after it start a new WAL file, and the damaged file moves to
  ``_damaged/``: the partition accepts publishes again after its last offset;
- a damaged manifest version moves to ``<stream>/_damaged/`` (storage takes the
  newest readable version and reconciles it with the segments on disk);
- a damaged cursor moves to ``_damaged/``: its subscription starts again from
  its start position on this partition (messages are redelivered, not lost);
- a damaged epoch file is rewritten with the highest epoch the WAL's frames
  hold (an owner claims a higher one from etcd anyway).

Every repair is an audit record (`tamto_common.audit`, category ``admin``,
action ``storage.repair``) naming the file, the offsets lost and what was done.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tamto_common.durable import fsync_dir, make_dirs
from tamto_common.errors import DataLoss
from tamto_protocol.segment import (
    CARRIED_DIR,
    FIRST_OFFSET_KEY,
    GENERATION_KEY,
    LAST_OFFSET_KEY,
    MAX_PUBLISH_KEY,
    MIN_PUBLISH_KEY,
    SEGMENT_SCHEMA,
    Manifest,
    ManifestError,
    SegmentEntry,
    manifest_versions,
    parse_carried_name,
    partition_dir_name,
    segment_file_name,
)
from tamto_storage.cursors import read_cursor_file
from tamto_storage.epoch import FILE_NAME as EPOCH_FILE
from tamto_storage.epoch import load_epoch, store_epoch
from tamto_storage.frame import HEADER_SIZE, decode_header
from tamto_storage.integrity import VerifiedFiles
from tamto_storage.manifest import newest_readable, rewrite
from tamto_storage.model import StoredBatch
from tamto_storage.partition import CURSORS_DIR, WAL_DIR, remove_sealed_wal_files
from tamto_storage.segments import (
    Segment,
    choose_live,
    load_segment,
    scan_segments,
    write_digested,
    write_segment,
)
from tamto_storage.wal_index import Corruption, IndexEntry
from tamto_storage.wal_recovery import list_wal_files, recover, valid_frame_after, wal_file_name

#: Where repair moves damaged files, inside their partition (or stream) directory.
DAMAGED_DIR = "_damaged"
_PARTITION_PREFIX = "partition="


@dataclass(frozen=True, slots=True)
class Finding:
    """One damaged file: what it is, where, the offsets it covers, and what is wrong."""

    kind: str  # segment | wal | manifest | cursor | epoch
    stream: str
    partition: int | None
    file: Path
    problem: str
    first_offset: int | None = None
    last_offset: int | None = None  # None with a first offset: to an end not known

    def offsets(self) -> str:
        if self.first_offset is None:
            return ""
        last = "" if self.last_offset is None else str(self.last_offset)
        return f"{self.first_offset}-{last}"

    def describe(self) -> str:
        where = self.stream if self.partition is None else f"{self.stream}/{self.partition}"
        offsets = f" offsets {self.offsets()}" if self.offsets() else ""
        return f"{self.kind} {where}{offsets}: {self.file}: {self.problem}"


@dataclass(frozen=True, slots=True)
class Repaired:
    """What `repair` did about one finding."""

    finding: Finding
    action: str
    lost: str  # the offsets lost ("" when none were)


def partition_dirs(stream_dir: Path) -> list[tuple[int, Path]]:
    """The partition directories of a stream, by number."""
    found = []
    for path in stream_dir.iterdir() if stream_dir.is_dir() else ():
        number = path.name.removeprefix(_PARTITION_PREFIX)
        if path.is_dir() and path.name.startswith(_PARTITION_PREFIX) and number.isdigit():
            found.append((int(number), path))
    return sorted(found)


def stream_dirs(data_dir: Path) -> list[Path]:
    streams = data_dir / "streams"
    return sorted(p for p in streams.iterdir() if p.is_dir()) if streams.is_dir() else []


def verify(
    data_dir: Path, stream: str | None = None, partition: int | None = None
) -> list[Finding]:
    """Every damaged file under `data_dir` (or one stream, or one partition of it)."""
    findings: list[Finding] = []
    for stream_dir in stream_dirs(data_dir):
        if stream is not None and stream_dir.name != stream:
            continue
        findings += _verify_manifest(stream_dir)
        manifest, _ = newest_readable(stream_dir)
        for number, pdir in partition_dirs(stream_dir):
            if partition is None or number == partition:
                findings += verify_partition(stream_dir.name, number, pdir, manifest)
    return findings


def _verify_manifest(stream_dir: Path) -> list[Finding]:
    findings = []
    for _, path in manifest_versions(stream_dir):
        try:
            Manifest.from_json(path.read_bytes(), str(path))
        except ManifestError as exc:
            findings.append(Finding("manifest", stream_dir.name, None, path, str(exc)))
    return findings


def verify_partition(stream: str, number: int, pdir: Path, manifest: Manifest) -> list[Finding]:
    """The damaged files of one partition directory."""
    findings = [
        Finding("segment", stream, number, s.path, problem, s.first_offset, s.last_offset)
        for s, problem in _damaged_segments(number, pdir, manifest)
    ]
    corruption = _wal_damage(pdir)
    if corruption is not None:
        findings.append(
            Finding(
                "wal",
                stream,
                number,
                corruption.file,
                f"{corruption.reason} at byte {corruption.position}",
                corruption.offset,
            )
        )
    cursors = pdir / CURSORS_DIR
    for path in sorted(cursors.glob("*.json")) if cursors.is_dir() else ():
        try:
            read_cursor_file(path)
        except DataLoss as exc:
            findings.append(Finding("cursor", stream, number, path, str(exc)))
    try:
        load_epoch(pdir)
    except DataLoss as exc:
        findings.append(Finding("epoch", stream, number, pdir / EPOCH_FILE, str(exc)))
    return findings


def _damaged_segments(number: int, pdir: Path, manifest: Manifest) -> list[tuple[Segment, str]]:
    """The partition's live segment files that fail a check, and why."""
    recorded = {entry.file: entry for entry in manifest.for_partition(number)}
    expired = {e.file for e in manifest.expired}
    live, _ = choose_live(scan_segments(number, pdir))
    verified = VerifiedFiles()
    damaged = []
    for segment in live:
        relative = segment.entry.file
        if relative in expired:
            continue  # retention removed it; only a reader of an old version may look
        entry = recorded.get(relative)
        digest = entry.digest if entry is not None else ""
        problem = segment.damage or segment_problem(segment, verified, digest)
        if problem:
            segment = segment if entry is None else Segment(entry, segment.path, problem)
            damaged.append((segment, problem))
    return damaged


def segment_problem(segment: Segment, verified: VerifiedFiles, digest: str | None = None) -> str:
    """What is wrong with a segment file ("" when nothing): its digest against `digest`
    (None: its entry's; "": none recorded), then every page's CRC, by decoding it all."""
    if digest is None:
        digest = segment.entry.digest
    try:
        problem = verified.check(segment.path, digest)
        if problem:
            return problem
        parquet = pq.ParquetFile(segment.path, page_checksum_verification=True)
        for group in range(parquet.metadata.num_row_groups):
            parquet.read_row_group(group, use_threads=False)
    except (OSError, ValueError, pa.ArrowException) as exc:  # ValueError: bad UTF-8 too
        return str(exc)
    return ""


def _wal_damage(pdir: Path) -> Corruption | None:
    wal_dir = pdir / WAL_DIR
    if not wal_dir.is_dir():
        return None
    return recover(wal_dir, truncate=False).corruption


# --- repair -------------------------------------------------------------------------


def repair(
    data_dir: Path,
    findings: list[Finding],
    record: Callable[[Repaired], None],
) -> list[Repaired]:
    """Repair each finding (see the module's docstring); `record` is called for each
    repair once it is durable (the caller audits it)."""
    done = []
    for finding in findings:
        stream_dir = data_dir / "streams" / finding.stream
        if finding.kind == "segment":
            repaired = _repair_segment(stream_dir, finding)
        elif finding.kind == "wal":
            repaired = _repair_wal(stream_dir, finding)
        elif finding.kind == "manifest":
            move_aside(finding.file, stream_dir / DAMAGED_DIR)
            repaired = Repaired(finding, "moved aside; the newest readable version is used", "")
        elif finding.kind == "cursor":
            move_aside(finding.file, finding.file.parent.parent / DAMAGED_DIR)
            repaired = Repaired(
                finding,
                "moved aside; the subscription starts again from its start position here",
                "",
            )
        else:
            repaired = _repair_epoch(finding)
        record(repaired)
        done.append(repaired)
    return done


def move_aside(path: Path, folder: Path) -> Path:
    """Move a damaged file into `folder` (kept as evidence), durably."""
    make_dirs(folder)
    target = folder / path.name
    os.replace(path, target)
    fsync_dir(path.parent)
    fsync_dir(folder)
    return target


def write_lost_range(
    stream_dir: Path, number: int, first: int, last: int, generation: int, publish_time_us: int
) -> None:
    """An empty segment covering `first`..`last` in generation `generation`, recorded in
    the manifest: the range stays part of the log, and reads step over it."""
    metadata = {
        **(SEGMENT_SCHEMA.metadata or {}),
        FIRST_OFFSET_KEY: str(first).encode(),
        LAST_OFFSET_KEY: str(last).encode(),
        MIN_PUBLISH_KEY: str(publish_time_us).encode(),
        MAX_PUBLISH_KEY: str(publish_time_us).encode(),
        GENERATION_KEY: str(generation).encode(),
    }
    path = stream_dir / partition_dir_name(number) / segment_file_name(first, last)
    digest = write_digested(path, SEGMENT_SCHEMA.empty_table().replace_schema_metadata(metadata))
    _record(stream_dir, Segment(replace(load_segment(number, path).entry, digest=digest), path))


def with_entry(manifest: Manifest, entry: SegmentEntry) -> Manifest:
    """`manifest` with `entry` in place of any entry of the same file."""
    others = tuple(s for s in manifest.segments if s.file != entry.file)
    return replace(manifest, segments=(*others, entry))


def _record(stream_dir: Path, segment: Segment) -> None:
    """Put `segment` in the manifest in place of any entry of the same file."""
    rewrite(stream_dir, lambda manifest: with_entry(manifest, segment.entry))


def _repair_segment(stream_dir: Path, finding: Finding) -> Repaired:
    assert finding.partition is not None
    assert finding.first_offset is not None
    assert finding.last_offset is not None
    path = finding.file
    pdir = path.parent.parent if path.parent.name == CARRIED_DIR else path.parent
    carried = parse_carried_name(path.name)
    generation = carried[2] if carried else 0
    manifest, _ = newest_readable(stream_dir)
    entry = next((e for e in manifest.segments if e.file == _relative(stream_dir, path)), None)
    publish = entry.max_publish_time_us if entry is not None else 0
    move_aside(path, pdir / DAMAGED_DIR)
    first, last = finding.first_offset, finding.last_offset
    if (pdir / segment_file_name(first, last)).exists():  # the plain name of a promoted rewrite
        move_aside(pdir / segment_file_name(first, last), pdir / DAMAGED_DIR / "plain")
    write_lost_range(stream_dir, finding.partition, first, last, generation + 1, publish)
    return Repaired(
        finding,
        f"moved to {pdir / DAMAGED_DIR}; an empty segment now covers offsets {first}-{last}",
        f"{first}-{last}",
    )


def _relative(stream_dir: Path, path: Path) -> str:
    return str(path.relative_to(stream_dir))


def _repair_wal(stream_dir: Path, finding: Finding) -> Repaired:
    assert finding.partition is not None
    pdir = finding.file.parent.parent
    wal_dir = pdir / WAL_DIR
    recovered = recover(wal_dir, truncate=False)
    corruption = recovered.corruption
    if corruption is None:
        return Repaired(finding, "no damage found any more", "")
    sealed_end = _sealed_end(stream_dir, finding.partition, pdir)
    damaged_at = corruption.offset
    # 1. What precedes the damage and is not sealed yet goes into a segment.
    unsealed = [e for e in recovered.entries if e.base_offset >= sealed_end]
    if unsealed:
        batches = [_read_batch(e) for e in unsealed]
        _record(stream_dir, write_segment(finding.partition, pdir, batches))
        sealed_end = unsealed[-1].end_offset
    last_time = recovered.entries[-1].publish_time_us if recovered.entries else 0
    # 2. Where valid frames resume, and what the damage cost.
    resume_offset, resume_at = _resume_point(corruption, recovered.max_epoch, wal_dir)
    lost = ""
    if resume_offset > max(damaged_at, sealed_end):
        first = max(damaged_at, sealed_end)
        write_lost_range(stream_dir, finding.partition, first, resume_offset - 1, 1, last_time)
        lost = f"{first}-{resume_offset - 1}"
    # 3. The valid frames after the damage start a new WAL file (named by its first
    # frame, or, empty, by the next offset); the damaged file goes.
    sealed_end = max(sealed_end, resume_offset)
    tail = b""
    if resume_at is not None:
        with corruption.file.open("rb") as f:
            f.seek(resume_at)
            tail = f.read()
    later = [
        p for first, p in list_wal_files(wal_dir) if p != corruption.file and first > damaged_at
    ]
    move_aside(corruption.file, pdir / DAMAGED_DIR)
    if tail or not later:
        _write_file(wal_dir / wal_file_name(resume_offset if tail else sealed_end), tail)
    remove_sealed_wal_files(wal_dir, sealed_end)
    action = (
        f"sealed the offsets before {damaged_at}; moved {corruption.file.name} to "
        f"{pdir / DAMAGED_DIR}; the WAL continues at offset {resume_offset}"
    )
    return Repaired(finding, action, lost)


def _sealed_end(stream_dir: Path, number: int, pdir: Path) -> int:
    manifest, _ = newest_readable(stream_dir)
    floor = manifest.start_offsets.get(number, 0)
    live, _ = choose_live(scan_segments(number, pdir))
    ends = [s.end_offset for s in live if s.first_offset >= floor]
    return max([floor, *ends])


def _resume_point(corruption: Corruption, max_epoch: int, wal_dir: Path) -> tuple[int, int | None]:
    """(the first offset after the damage that is still whole, the byte of the damaged
    file where its frames start, or None when they start in a later file or nowhere)."""
    path = corruption.file
    size = path.stat().st_size
    with path.open("rb") as f:
        later = valid_frame_after(f, size, corruption.position + 1, corruption.offset, max_epoch)
        if later is not None:
            f.seek(later)
            return decode_header(f.read(HEADER_SIZE)).base_offset, later
        f.seek(corruption.position)
        header_bytes = f.read(HEADER_SIZE)
    files = [first for first, p in list_wal_files(wal_dir) if first > corruption.offset]
    if files:
        return files[0], None
    if len(header_bytes) == HEADER_SIZE:
        header = decode_header(header_bytes)
        fits = corruption.position + header.frame_length <= size
        if header.base_offset == corruption.offset and 1 <= header.count <= 1 << 24 and fits:
            return corruption.offset + header.count, None  # the body was hit, not the header
    return corruption.offset, None


def _read_batch(entry: IndexEntry) -> StoredBatch:
    """The batch of a frame recovery already checked."""
    with entry.file.open("rb") as f:
        f.seek(entry.position + HEADER_SIZE)
        body = f.read(entry.body_length)
    return StoredBatch(entry.base_offset, entry.count, entry.publish_time_us, body)


def _write_file(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(path.parent)


def _repair_epoch(finding: Finding) -> Repaired:
    pdir = finding.file.parent
    wal_dir = pdir / WAL_DIR
    epoch = recover(wal_dir, truncate=False).max_epoch if wal_dir.is_dir() else 0
    move_aside(finding.file, pdir / DAMAGED_DIR)
    store_epoch(pdir, epoch)
    return Repaired(finding, f"rewritten with epoch {epoch}, the highest its WAL holds", "")
