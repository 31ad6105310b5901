"""Rebuilding a partition's WAL index from its files when the partition opens.

Files are scanned in offset order and every frame's CRC and offsets are checked.
A torn tail — an incomplete frame, a CRC failure on the very last frame of the
last file, or a bad frame followed only by zeros (a power cut after the file grew,
before its blocks were written) — is what a crash mid-write leaves behind; nothing
after it was ever acknowledged, so it is truncated away (and logged). Anything else that fails a
check is corruption: indexing stops there and the partition refuses to serve it.
Blocking: run through a thread.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import structlog

from tamto_storage.frame import HEADER_SIZE, crc_matches, decode_header
from tamto_storage.wal_index import Corruption, IndexEntry

log = structlog.get_logger(__name__)

SUFFIX = ".log"


def wal_file_name(first_offset: int) -> str:
    """The name of a WAL file whose first frame holds `first_offset`."""
    return f"{first_offset:020d}{SUFFIX}"


@dataclass(frozen=True, slots=True)
class Recovered:
    """A WAL as found on disk."""

    entries: tuple[IndexEntry, ...]
    start_offset: int
    next_offset: int  # where the valid log ends (the corrupt offset, if any)
    max_epoch: int
    tail: tuple[Path, int] | None  # last file and its size, where appends continue
    corruption: Corruption | None


def list_wal_files(wal_dir: Path) -> list[tuple[int, Path]]:
    """The WAL files in `wal_dir`, by first offset; other names are ignored."""
    found = []
    for path in wal_dir.iterdir():
        stem = path.name.removesuffix(SUFFIX)
        if path.name.endswith(SUFFIX) and stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


class _Scan:
    def __init__(self) -> None:
        self.entries: list[IndexEntry] = []
        self.max_epoch = 0
        self.corruption: Corruption | None = None


def recover(wal_dir: Path, *, truncate: bool = True) -> Recovered:
    """Scan, check and index every WAL file; truncate a torn tail.

    `truncate` False (`tamto storage verify`, which only looks): a torn tail is
    left as it is and logged, and the log ends before it as it would after truncation.
    """
    files = list_wal_files(wal_dir)
    scan = _Scan()
    start = files[0][0] if files else 0
    expected = start
    for i, (first, path) in enumerate(files):
        if first != expected:
            scan.corruption = Corruption(
                expected, path, 0, f"file starts at offset {first}, expected {expected}"
            )
            break
        last_file = i == len(files) - 1
        expected = _scan_file(path, expected, last_file=last_file, scan=scan, truncate=truncate)
        if scan.corruption is not None:
            break
    tail = None
    if files and scan.corruption is None:
        tail = (files[-1][1], files[-1][1].stat().st_size)
    if scan.corruption is not None:
        c = scan.corruption = replace(
            scan.corruption, known_end=_end_beyond(files, scan.corruption, scan.max_epoch)
        )
        log.error(
            "wal corruption",
            file=str(c.file),
            position=c.position,
            offset=c.offset,
            reason=c.reason,
            frames_beyond_end=c.known_end,
        )
    return Recovered(
        entries=tuple(scan.entries),
        start_offset=start,
        next_offset=expected,
        max_epoch=scan.max_epoch,
        tail=tail,
        corruption=scan.corruption,
    )


def _end_beyond(files: list[tuple[int, Path]], corruption: Corruption, max_epoch: int) -> int:
    """Where the frames that still check out after the damage end (the damaged offset
    + 1 when there are none): acknowledged messages the log holds but cannot serve
    until repair, which the partition's end must not hide."""
    end = corruption.offset + 1
    after = False
    for _, path in files:
        after = after or path == corruption.file
        if not after:
            continue
        size = path.stat().st_size
        start = corruption.position + 1 if path == corruption.file else 0
        with path.open("rb") as f:
            position = valid_frame_after(f, size, start, corruption.offset, max_epoch)
            while position is not None:
                f.seek(position)
                header_bytes = f.read(HEADER_SIZE)
                header = decode_header(header_bytes)
                body = f.read(header.body_length)
                if len(body) != header.body_length or not crc_matches(header_bytes, body):
                    position = valid_frame_after(f, size, position + 1, end, max_epoch)
                    continue
                end = max(end, header.base_offset + header.count)
                position += header.frame_length
                if position + HEADER_SIZE > size:
                    break
    return end


def _scan_file(path: Path, expected: int, *, last_file: bool, scan: _Scan, truncate: bool) -> int:
    """Index the frames of one file; returns the offset after its last good frame."""
    size = path.stat().st_size
    position = 0
    with path.open("rb") as f:
        while position < size:
            problem = _check_frame(f, path, size, position, expected, last_file=last_file)
            if isinstance(problem, IndexEntry):
                scan.entries.append(problem)
                scan.max_epoch = max(scan.max_epoch, problem.epoch)
                expected = problem.end_offset
                position += problem.frame_length
                continue
            torn, reason = problem
            if not torn and last_file and _zeros_after(f, position, size):
                torn, reason = True, f"{reason}, and only zeros follow it"
            if torn and last_file:
                later = valid_frame_after(f, size, position + 1, expected, scan.max_epoch)
                if later is None:
                    if truncate:
                        _truncate(path, position, size, reason)
                    break
                # A damaged header (say, its length) can pass for a torn write, but
                # a crash never leaves a good frame after a torn one: this is damage,
                # and the acknowledged frames beyond it must not be cut away.
                reason = f"{reason}, yet a valid frame follows at byte {later}"
            scan.corruption = Corruption(expected, path, position, reason)
            break
    return expected


def _zeros_after(f: BinaryIO, position: int, size: int) -> bool:
    """Whether the bad frame at `position` ends the file in zeros: a crash after the file
    grew but before its blocks were written (power loss) leaves zeros, not data. Zeros from
    the frame's end (from the frame itself when its header is zeros) to the end of the file."""
    f.seek(position)
    header = f.read(HEADER_SIZE)
    start = position
    if len(header) == HEADER_SIZE and any(header):
        start = min(position + decode_header(header).frame_length, size)
    f.seek(start)
    while chunk := f.read(1 << 20):
        if chunk.count(0) != len(chunk):
            return False
    return True


#: How many epochs past the last good frame's a later frame's epoch is looked for.
_EPOCH_SEARCH = 16


def valid_frame_after(
    f: BinaryIO,
    size: int,
    start: int,
    expected: int,
    last_epoch: int,
    also: Iterable[int] = (),
) -> int | None:
    """The position of a valid frame after `start` holding offsets >= `expected`, if any.

    Candidates are found by their epoch field (a later frame was written in the
    same or a slightly newer epoch, or in one of the epochs `also` lists), so the
    search is a few C-speed `find`s over the tail rather than a parse at every byte.
    """
    f.seek(start)
    tail = f.read(size - start)
    epoch_at = HEADER_SIZE - 8  # the epoch is the header's last field
    first = max(last_epoch, 0)
    epochs = sorted({*range(first, first + _EPOCH_SEARCH), *(e for e in also if e >= first)})
    best: int | None = None
    for epoch in epochs:
        needle = struct.pack("<q", epoch)
        hit = tail.find(needle, epoch_at)
        while hit != -1 and (best is None or hit - epoch_at < best):
            candidate = hit - epoch_at
            header = decode_header(tail[candidate : candidate + HEADER_SIZE])
            end = candidate + header.frame_length
            if header.base_offset >= expected and header.count >= 1 and end <= len(tail):
                body = tail[candidate + HEADER_SIZE : end]
                if crc_matches(tail[candidate : candidate + HEADER_SIZE], body):
                    best = candidate
                    break
            hit = tail.find(needle, hit + 1)
    return None if best is None else start + best


def _check_frame(
    f: BinaryIO, path: Path, size: int, position: int, expected: int, *, last_file: bool
) -> IndexEntry | tuple[bool, str]:
    """The frame at `position` as an index entry, or (torn?, what is wrong)."""
    found = frame_at(f, path, size, position)
    if isinstance(found, IndexEntry):
        if found.base_offset != expected:
            return False, f"frame holds offset {found.base_offset}, expected {expected}"
        return found
    torn, reason = found
    if reason == _CRC_MISMATCH:
        # Only the final frame of the last file can be a write the crash cut short.
        end = position + HEADER_SIZE + decode_header(_header(f, position)).body_length
        return (last_file and end == size), reason
    return torn, reason


_CRC_MISMATCH = "frame checksum mismatch"


def _header(f: BinaryIO, position: int) -> bytes:
    f.seek(position)
    return f.read(HEADER_SIZE)


def frame_at(f: BinaryIO, path: Path, size: int, position: int) -> IndexEntry | tuple[bool, str]:
    """The frame at `position` of `path` (`size` bytes) as an index entry when it checks
    out (whole, its CRC, at least one message), else (torn?, what is wrong): torn when
    the file ends inside it."""
    header_bytes = _header(f, position)
    if len(header_bytes) < HEADER_SIZE:
        return True, f"incomplete frame header ({len(header_bytes)} of {HEADER_SIZE} bytes)"
    header = decode_header(header_bytes)
    if position + header.frame_length > size:
        return True, f"incomplete frame ({size - position} of {header.frame_length} bytes)"
    body = f.read(header.body_length)
    if not crc_matches(header_bytes, body):
        return False, _CRC_MISMATCH
    if header.count < 1 or header.body_length == 0:
        return False, f"frame holds {header.count} messages in {header.body_length} bytes"
    return IndexEntry(
        base_offset=header.base_offset,
        count=header.count,
        publish_time_us=header.publish_time_us,
        epoch=header.epoch,
        file=path,
        position=position,
        body_length=header.body_length,
    )


def _truncate(path: Path, position: int, size: int, reason: str) -> None:
    log.warning(
        "wal torn tail truncated",
        file=str(path),
        position=position,
        dropped_bytes=size - position,
        reason=reason,
    )
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, position)
        os.fsync(fd)
    finally:
        os.close(fd)
