"""Repairing a damaged WAL with its node stopped (`tamto storage repair`): every frame
that checks out is kept, exactly the offsets no frame holds are recorded as lost,
and the partition takes publishes again after the last offset it ever reported.

Recovery at open stops at the first problem in a partition's WAL (a missing
file, a file cut short, garbled bytes: `tamto_storage.wal_recovery`), since
appending past it could reuse acknowledged offsets. Repair looks at all of it:

1. *salvage*: every WAL file, frame by frame. A frame counts when it is whole,
   its CRC checks out and it holds at least one message; past bytes that do
   not, the search goes on at the next frame that checks out
   (`valid_frame_after`, by the epochs this WAL's frames hold). Frames are
   taken in offset order; one overlapping offsets already taken is left in its
   file, which is kept aside.
2. *seal*: from the partition's sealed end, each run of consecutive frames
   becomes segments (a batch that cannot be sealed is quarantined, as the
   sealer does), each gap before a run an empty segment recording exactly
   those offsets as lost (`tamto_storage.repair_files.write_lost_range`).
3. *the end*: the log continues at the highest of the last frame's end, the
   sealed end, and the end the damaged partition reported (at least one past
   its first damaged offset, or the end of the frames found after the damage:
   routers may have built on it), or, when no frame follows the damage, the
   end the damaged frame's own header gives (only its body was hit). Offsets
   from the last frame to there are lost too.
4. *the WAL*: files holding bytes no frame accounts for move to ``_damaged/``
   (kept as evidence); the others are wholly sealed now and go, as the sealer
   would delete them; the WAL starts again, empty, at the end, and the epoch
   file is raised to the highest epoch a frame held.

A second pass finds no damage and changes nothing. A pass cut short (a crash)
leaves segments that are whole and the WAL as it was: the next pass goes on
from the sealed end. Blocking: the CLI runs it as it is.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tamto_common.durable import make_dirs
from tamto_common.errors import DataLoss
from tamto_storage.epoch import load_epoch, store_epoch
from tamto_storage.frame import HEADER_SIZE, decode_header
from tamto_storage.model import PartitionId, StoredBatch
from tamto_storage.partition_files import WAL_DIR, remove_files
from tamto_storage.quarantine import quarantine, runs
from tamto_storage.repair_files import (
    DAMAGED_DIR,
    move_aside,
    record_segment,
    sealed_end,
    write_lost_range,
)
from tamto_storage.sealer import SealOptions
from tamto_storage.segments import write_segment
from tamto_storage.wal import create_wal_file
from tamto_storage.wal_index import Corruption, IndexEntry
from tamto_storage.wal_recovery import (
    Recovered,
    frame_at,
    list_wal_files,
    recover,
    valid_frame_after,
    wal_file_name,
)

#: Body bytes sealed into one segment by a repair (the sealer's default size).
SEGMENT_BYTES = SealOptions().segment_bytes
#: The most messages a damaged frame's header is believed to hold.
_MAX_HEADER_COUNT = 1 << 24


@dataclass(frozen=True, slots=True)
class Salvaged:
    """What a WAL directory still holds: its frames that check out, by offset and none
    overlapping another, and the files holding bytes those frames do not account for."""

    frames: tuple[IndexEntry, ...]
    damaged: tuple[Path, ...]

    @property
    def max_epoch(self) -> int:
        return max((f.epoch for f in self.frames), default=0)


@dataclass(frozen=True, slots=True)
class WalRepair:
    """What `repair_wal` did: the offsets it recorded as lost, and in words."""

    lost: tuple[tuple[int, int], ...]
    action: str


def salvage(wal_dir: Path) -> Salvaged:
    """Every frame of `wal_dir`'s files that checks out (see the module docstring)."""
    files = [path for _, path in list_wal_files(wal_dir)] if wal_dir.is_dir() else []
    # The epochs of the frames readable from each file's start: frames past damage
    # are looked for by these (and the ones just above), wherever the damage is.
    epochs = {f.epoch for path in files for f in _frames_of(path, None)[0]}
    found: list[IndexEntry] = []
    damaged: list[Path] = []
    for path in files:
        frames, whole = _frames_of(path, epochs)
        found += frames
        if not whole:
            damaged.append(path)
    kept: list[IndexEntry] = []
    for frame in sorted(found, key=lambda f: (f.base_offset, f.file, f.position)):
        if kept and frame.base_offset < kept[-1].end_offset:
            damaged.append(frame.file)  # offsets taken already: left where it is
            continue
        kept.append(frame)
    return Salvaged(tuple(kept), tuple(sorted(set(damaged))))


def _frames_of(path: Path, epochs: Collection[int] | None) -> tuple[list[IndexEntry], bool]:
    """The frames of one file that check out, and whether they account for all its
    bytes. `epochs` None: stop at the first problem, else search past it by them."""
    size = path.stat().st_size
    frames: list[IndexEntry] = []
    position = 0
    whole = True
    with path.open("rb") as f:
        while position < size:
            found = frame_at(f, path, size, position)
            if isinstance(found, IndexEntry):
                frames.append(found)
                position += found.frame_length
                continue
            whole = False
            if epochs is None:
                break
            last_epoch = frames[-1].epoch if frames else min(epochs, default=0)
            floor = frames[-1].end_offset if frames else 0
            later = valid_frame_after(f, size, position + 1, floor, last_epoch, epochs)
            if later is None:
                break
            position = later
    return frames, whole


def repair_wal(stream_dir: Path, number: int, pdir: Path) -> WalRepair:
    """Repair the WAL of partition `number` (directory `pdir`) of the stream in
    `stream_dir`: see the module docstring."""
    wal_dir = pdir / WAL_DIR
    recovered = recover(wal_dir, truncate=False) if wal_dir.is_dir() else None
    found = salvage(wal_dir)
    start = sealed_end(stream_dir, number, pdir)
    frames = [f for f in found.frames if f.base_offset >= start]
    lost: list[tuple[int, int]] = []
    position = start
    publish_us = frames[0].publish_time_us if frames else 0
    for run in _consecutive(frames):
        if run[0].base_offset > position:
            lost.append((position, run[0].base_offset - 1))
            write_lost_range(stream_dir, number, position, run[0].base_offset - 1, 1, publish_us)
        _seal(stream_dir, PartitionId(stream_dir.name, number), pdir, run)
        position = run[-1].end_offset
        publish_us = run[-1].publish_time_us
    end = max(position, _reported_end(recovered, found))
    if end > position:
        lost.append((position, end - 1))
        write_lost_range(stream_dir, number, position, end - 1, 1, publish_us)
    aside = [move_aside(path, pdir / DAMAGED_DIR).name for path in found.damaged]
    _restart(wal_dir, end)
    _raise_epoch(pdir, found.max_epoch)
    sealed = (
        f"sealed the frames that check out in offsets {start}-{position - 1}; "
        if position > start
        else ""
    )
    moved = f"moved {', '.join(aside)} to {pdir / DAMAGED_DIR}; " if aside else ""
    return WalRepair(tuple(lost), f"{sealed}{moved}the WAL continues at offset {end}")


def seal_from_wal(stream_dir: Path, number: int, pdir: Path, first: int, last: int) -> bool:
    """Seal offsets `first`..`last` again from the WAL's frames when frames that check
    out hold exactly that range (a lost or damaged segment whose WAL files are still
    there: the read tail, or files not trimmed yet); whether it did."""
    frames = [
        f
        for f in salvage(pdir / WAL_DIR).frames
        if first <= f.base_offset and f.end_offset <= last + 1
    ]
    runs_found = list(_consecutive(frames))
    if len(runs_found) != 1 or (frames[0].base_offset, frames[-1].end_offset) != (first, last + 1):
        return False
    _seal(stream_dir, PartitionId(stream_dir.name, number), pdir, frames)
    return True


def _consecutive(frames: Sequence[IndexEntry]) -> Iterator[list[IndexEntry]]:
    """`frames` (by offset) in runs where each frame starts where the previous ends."""
    run: list[IndexEntry] = []
    for frame in frames:
        if run and frame.base_offset != run[-1].end_offset:
            yield run
            run = []
        run.append(frame)
    if run:
        yield run


def _seal(stream_dir: Path, pid: PartitionId, pdir: Path, run: Sequence[IndexEntry]) -> None:
    """Seal consecutive frames into segments of about `SEGMENT_BYTES`, recorded in the
    manifest; a batch that cannot be sealed is quarantined (`tamto_storage.quarantine`)."""
    for chunk in _chunks(run):
        batches = [_read_batch(entry) for entry in chunk]
        for part, reason in runs(batches):
            if reason is None:
                segment = write_segment(pid.partition, pdir, part)
            else:
                segment = quarantine(pid, pdir, part[0], reason)
            record_segment(stream_dir, segment)


def _chunks(run: Sequence[IndexEntry]) -> Iterator[list[IndexEntry]]:
    """`run` in chunks of about `SEGMENT_BYTES` of bodies (at least one frame each)."""
    chunk: list[IndexEntry] = []
    size = 0
    for entry in run:
        if chunk and size + entry.body_length > SEGMENT_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry.body_length
    if chunk:
        yield chunk


def _read_batch(entry: IndexEntry) -> StoredBatch:
    """The batch of a frame `salvage` already checked."""
    with entry.file.open("rb") as f:
        f.seek(entry.position + HEADER_SIZE)
        body = f.read(entry.body_length)
    return StoredBatch(entry.base_offset, entry.count, entry.publish_time_us, body)


def _reported_end(recovered: Recovered | None, found: Salvaged) -> int:
    """The end the partition reported with its WAL as it was (`Partition.offsets`), or
    the damaged frame's own end when its header checks out and no frame follows it."""
    if recovered is None:
        return 0
    c = recovered.corruption
    if c is None:
        return recovered.next_offset
    end = max(recovered.next_offset, c.offset + 1, c.known_end or 0)
    if not any(f.base_offset >= c.offset for f in found.frames):
        end = max(end, _header_end(c))
    return end


def _header_end(c: Corruption) -> int:
    """Where the damaged frame's messages end by its header, when the header is
    believable (it names the damaged offset, a count and a length that fit), else 0."""
    try:
        with c.file.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(c.position)
            header_bytes = f.read(HEADER_SIZE)
    except FileNotFoundError:
        return 0
    if len(header_bytes) < HEADER_SIZE:
        return 0
    header = decode_header(header_bytes)
    fits = c.position + header.frame_length <= size
    if header.base_offset == c.offset and 1 <= header.count <= _MAX_HEADER_COUNT and fits:
        return c.offset + header.count
    return 0


def _restart(wal_dir: Path, end: int) -> None:
    """The WAL as one empty file named `end` (the others are sealed or kept aside)."""
    make_dirs(wal_dir)
    target = wal_dir / wal_file_name(end)
    others = [path for _, path in list_wal_files(wal_dir) if path != target]
    remove_files(others)
    create_wal_file(target)


def _raise_epoch(pdir: Path, epoch: int) -> None:
    """Keep the epoch file at least at the highest epoch a frame held (the WAL's frames
    are gone now); a damaged epoch file is repaired on its own, before the WAL."""
    try:
        stored = load_epoch(pdir)
    except DataLoss:
        return
    if epoch > stored:
        store_epoch(pdir, epoch)


def wal_problem(
    wal_dir: Path, sealed_to: int, segments_end: int
) -> tuple[Path, str, int | None, int | None] | None:
    """What is wrong with a partition's WAL, as (file, problem, first offset lost, last
    offset lost or None when not known), or None. `sealed_to`: where the sealed log
    ends by its segment files and the manifest; `segments_end`: by its files alone.

    Damage recovery stops at (a frame that fails its checks, a file missing between
    two others), a WAL starting past the sealed log's end (its first files are
    missing), or ending below the end of the segments sealed from it (its files are
    missing: the partition would hand out sealed offsets again)."""
    recovered = recover(wal_dir, truncate=False) if wal_dir.is_dir() else None
    if recovered is not None and recovered.corruption is not None:
        c = recovered.corruption
        return c.file, f"{c.reason} at byte {c.position}", c.offset, None
    files = list_wal_files(wal_dir) if wal_dir.is_dir() else []
    if recovered is not None and files and recovered.start_offset > sealed_to:
        start = recovered.start_offset
        problem = (
            f"the WAL starts at offset {start} but the sealed log ends at {sealed_to}: "
            "no file holds the offsets between (missing)"
        )
        return files[0][1], problem, sealed_to, start - 1
    end = recovered.next_offset if recovered is not None else 0
    if end < segments_end:
        problem = (
            f"the WAL ends at offset {end}, below the end {segments_end} of the segments "
            "sealed from it (its files are missing)"
        )
        return wal_dir, problem, None, None
    return None
