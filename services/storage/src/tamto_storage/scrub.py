"""`tamto storage verify` and `tamto storage repair`: scrubbing a node's files, and
returning damaged partitions to service with the loss recorded.

Both work on a storage data directory while its storage node is stopped (they
read and write the files a running node holds open), and block: the CLI runs
them as they are.

`verify` checks every file storage keeps, the way storage itself would: every
manifest version (JSON and checksum), every segment (footer, the manifest's
file digest, every page's CRC by decoding it all), every WAL file (every
frame's CRC and offsets, as recovery does, without truncating anything), every
cursor and the epoch (their checksums). It also finds what is missing: offsets
between the floor and the last segment no segment file holds, a WAL that
starts past the sealed log's end or ends below it, a partition directory the
manifest records segments of. Each problem is a `Finding` naming the file and,
where it holds messages, the offsets it covers.

`repair` deals with each finding so that storage serves the partition again,
recording exactly the offsets no intact file holds as lost (docs/recovery.md,
"Damaged and missing files", has the table by damage kind):

- a damaged segment moves to ``partition=<p>/_damaged/`` and an empty segment
  of the next generation takes its name, covering the same range: reads step
  over the lost offsets, as over messages interest retention removed; a
  missing one (a gap) becomes such an empty segment too;
- a damaged or missing WAL file (`tamto_storage.wal_repair`): every frame that
  checks out, before and after the damage, is sealed into segments, the
  offsets no frame holds become empty segments, files holding damaged bytes
  move to ``_damaged/``, and the WAL starts again, empty, after the last
  offset the partition ever reported: it accepts publishes again;
- a missing partition directory: the range the manifest records for it is
  lost (an empty segment), and its WAL starts after it;
- a damaged manifest version moves to ``<stream>/_damaged/`` (storage takes the
  newest readable version and reconciles it with the segments on disk);
- a damaged cursor moves to ``_damaged/``: its subscription starts again from
  its start position on this partition (messages are redelivered, not lost);
- a damaged epoch file is rewritten with the highest epoch the WAL's frames
  hold (an owner claims a higher one from etcd anyway).

A repaired directory verifies clean, so a second `repair` finds nothing to do.
Every repair is an audit record (`tamto_common.audit`, category ``admin``,
action ``storage.repair``) naming the file, the offsets lost and what was done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tamto_common.errors import DataLoss
from tamto_protocol.segment import (
    CARRIED_DIR,
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
from tamto_storage.integrity import VerifiedFiles
from tamto_storage.manifest import newest_readable
from tamto_storage.partition_files import CURSORS_DIR, WAL_DIR
from tamto_storage.repair_files import DAMAGED_DIR, move_aside, write_lost_range
from tamto_storage.segments import Segment, choose_live, scan_segments
from tamto_storage.wal_repair import repair_wal, salvage, seal_from_wal, wal_problem

_PARTITION_PREFIX = "partition="


@dataclass(frozen=True, slots=True)
class Finding:
    """One damaged file: what it is, where, the offsets it covers, and what is wrong."""

    kind: str  # segment | wal | partition | manifest | cursor | epoch
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


#: The offset ranges, (first, last), the segment store holds of a partition
#: (`tamto_storage.store_held.StoreHeld`): not missing when no local file holds them.
HeldElsewhere = Callable[[str, int], list[tuple[int, int]]]


def verify(
    data_dir: Path,
    stream: str | None = None,
    partition: int | None = None,
    held: HeldElsewhere | None = None,
) -> list[Finding]:
    """Every damaged or missing file under `data_dir` (or one stream, or one partition);
    `held`: what the segment store holds (a reclaimed local copy is not missing)."""
    findings: list[Finding] = []
    for stream_dir in stream_dirs(data_dir):
        if stream is not None and stream_dir.name != stream:
            continue
        findings += _verify_manifest(stream_dir)
        manifest, _ = newest_readable(stream_dir)
        found = dict(partition_dirs(stream_dir))
        for number in sorted({*found, *(s.partition for s in _recorded(manifest))}):
            if partition is not None and number != partition:
                continue
            pdir = found.get(number)
            if pdir is None:
                findings += _missing_partition(stream_dir, number, manifest)
            else:
                elsewhere = held(stream_dir.name, number) if held is not None else []
                findings += verify_partition(stream_dir.name, number, pdir, manifest, elsewhere)
    return findings


def _recorded(manifest: Manifest, number: int | None = None) -> list[SegmentEntry]:
    """The manifest's live segment entries (of partition `number`), at or above the floor."""
    expired = {e.file for e in manifest.expired}
    return [
        s
        for s in manifest.segments
        if s.file not in expired
        and (number is None or s.partition == number)
        and s.first_offset >= manifest.start_offsets.get(s.partition, 0)
    ]


def _missing_partition(stream_dir: Path, number: int, manifest: Manifest) -> list[Finding]:
    """A partition the manifest records segments of, whose directory is gone."""
    entries = _recorded(manifest, number)
    first = min(e.first_offset for e in entries)
    last = max(e.last_offset for e in entries)
    problem = f"the partition's directory is missing; the manifest records offsets {first}-{last}"
    pdir = stream_dir / partition_dir_name(number)
    return [Finding("partition", stream_dir.name, number, pdir, problem, first, last)]


def _verify_manifest(stream_dir: Path) -> list[Finding]:
    findings = []
    for _, path in manifest_versions(stream_dir):
        try:
            Manifest.from_json(path.read_bytes(), str(path))
        except ManifestError as exc:
            findings.append(Finding("manifest", stream_dir.name, None, path, str(exc)))
    return findings


def verify_partition(
    stream: str,
    number: int,
    pdir: Path,
    manifest: Manifest,
    held: list[tuple[int, int]] | None = None,
) -> list[Finding]:
    """The damaged or missing files of one partition directory, in the order repair
    takes them (the epoch before the WAL, whose frames tell it; segments before the
    WAL, which continues after them). `held`: the ranges the segment store holds."""
    findings = []
    try:
        load_epoch(pdir)
    except DataLoss as exc:
        findings.append(Finding("epoch", stream, number, pdir / EPOCH_FILE, str(exc)))
    findings += [
        Finding("segment", stream, number, s.path, problem, s.first_offset, s.last_offset)
        for s, problem in _damaged_segments(number, pdir, manifest)
    ]
    live = _live(number, pdir, manifest)
    findings += [
        Finding(
            "segment", stream, number, pdir / segment_file_name(first, last), problem, first, last
        )
        for first, last, problem in _segment_gaps(number, live, manifest, held or [])
    ]
    sealed_to = max(
        [_floor(manifest, number), *(e.end_offset for e in _recorded(manifest, number))]
    )
    sealed_to = max([sealed_to, *(s.end_offset for s in live)])
    live_end = max((s.end_offset for s in live), default=0)
    wal = wal_problem(pdir / WAL_DIR, sealed_to, live_end)
    if wal is not None:
        findings.append(Finding("wal", stream, number, *wal))
    cursors = pdir / CURSORS_DIR
    for path in sorted(cursors.glob("*.json")) if cursors.is_dir() else ():
        try:
            read_cursor_file(path)
        except DataLoss as exc:
            findings.append(Finding("cursor", stream, number, path, str(exc)))
    return findings


def _floor(manifest: Manifest, number: int) -> int:
    return manifest.start_offsets.get(number, 0)


def _live(number: int, pdir: Path, manifest: Manifest) -> list[Segment]:
    """The partition's live segment files at or above its floor, by offset."""
    live, _ = choose_live(scan_segments(number, pdir))
    return [s for s in live if s.first_offset >= _floor(manifest, number)]


def _segment_gaps(
    number: int, live: list[Segment], manifest: Manifest, held: list[tuple[int, int]]
) -> list[tuple[int, int, str]]:
    """The offsets between the floor and the last segment (a live file or one the
    manifest records) that no segment file holds, here or in the segment store
    (`held`): (first, last, what is wrong)."""
    gaps = []
    position = _floor(manifest, number)
    ranges = sorted(
        [*((s.first_offset, s.end_offset) for s in live), *((f, t + 1) for f, t in held)]
    )
    for first, end in ranges:
        if first > position:
            gaps.append((position, first - 1))
        position = max(position, end)
    recorded_end = max((e.end_offset for e in _recorded(manifest, number)), default=0)
    if recorded_end > position:
        gaps.append((position, recorded_end - 1))
    return [(first, last, "no segment file holds these offsets (missing)") for first, last in gaps]


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
        elif finding.kind in ("wal", "partition"):
            repaired = _repair_log(stream_dir, finding)
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
    first, last = finding.first_offset, finding.last_offset
    moved = ""
    if path.exists():  # else missing: no file holds the range
        move_aside(path, pdir / DAMAGED_DIR)
        moved = f"moved to {pdir / DAMAGED_DIR}; "
    if (pdir / segment_file_name(first, last)).exists():  # the plain name of a promoted rewrite
        move_aside(pdir / segment_file_name(first, last), pdir / DAMAGED_DIR / "plain")
    if not generation and seal_from_wal(stream_dir, finding.partition, pdir, first, last):
        return Repaired(finding, f"{moved}sealed again from the WAL's intact frames", "")
    write_lost_range(stream_dir, finding.partition, first, last, generation + 1, publish)
    return Repaired(
        finding, f"{moved}an empty segment now covers offsets {first}-{last}", f"{first}-{last}"
    )


def _relative(stream_dir: Path, path: Path) -> str:
    return str(path.relative_to(stream_dir))


def _repair_log(stream_dir: Path, finding: Finding) -> Repaired:
    """A damaged or missing WAL (`tamto_storage.wal_repair`), or a missing partition
    directory: the range the manifest records for it is lost, and its WAL starts after."""
    assert finding.partition is not None
    number = finding.partition
    pdir = stream_dir / partition_dir_name(number)
    lost: list[tuple[int, int]] = []
    if finding.kind == "partition":
        assert finding.first_offset is not None
        assert finding.last_offset is not None
        lost.append((finding.first_offset, finding.last_offset))
        write_lost_range(stream_dir, number, *lost[0], 1, 0)
    done = repair_wal(stream_dir, number, pdir)
    lost += done.lost
    return Repaired(finding, done.action, ",".join(f"{a}-{b}" for a, b in lost))


def _repair_epoch(finding: Finding) -> Repaired:
    pdir = finding.file.parent
    epoch = salvage(pdir / WAL_DIR).max_epoch
    move_aside(finding.file, pdir / DAMAGED_DIR)
    store_epoch(pdir, epoch)
    return Repaired(finding, f"rewritten with epoch {epoch}, the highest its WAL holds", "")
