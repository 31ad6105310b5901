"""The segment files a partition finds on disk at load, reconciled with what its
stream's manifest records of them (`recorded`): digests carry over, a file that
changed under its name is damaged, and a recorded segment whose file is gone
keeps its place in the log as damaged. Blocking: call through a thread."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tamto_protocol.segment import SegmentEntry
from tamto_storage.integrity import file_digest
from tamto_storage.segments import Segment

#: The damage of a recorded segment whose file is gone (served from the segment
#: store instead when it has one: `SegmentLog.serve_missing_from`).
FILE_MISSING = "the file is missing"


def reconcile_found(
    directory: Path, found: list[Segment], recorded: Sequence[SegmentEntry]
) -> list[Segment]:
    """The segments of partition directory `directory`: those `found` on disk as the
    manifest records them (`_match_recorded`), with the recorded ones whose files are
    gone (`_missing`), by offset."""
    matched = _match_recorded(found, recorded)
    return sorted([*matched, *_missing(directory, matched, recorded)], key=_by_range)


def _match_recorded(found: list[Segment], recorded: Sequence[SegmentEntry]) -> list[Segment]:
    """The segments found on disk, with what the manifest recorded of them (blocking).

    A file the manifest records with the same range, generation, rows, size and
    times gets the recorded digest; a damaged one gets its recorded entry whole
    (its footer could not say). A file whose footer says otherwise than its
    entry, with no newer generation to explain it, changed under its name: it is
    damaged. A file the manifest does not record as it is (sealed just before a
    crash, or a rewrite promoted to the plain name just before one) takes the
    digest recorded for its range and generation, or is digested now.
    """
    by_file = {entry.file: entry for entry in recorded}
    by_version = {(e.first_offset, e.last_offset, e.generation): e for e in recorded}
    matched = []
    for segment in found:
        entry = by_file.get(segment.entry.file)
        mine = segment.entry
        if segment.damage:
            if entry is not None:
                segment = replace(segment, entry=entry)
        elif entry is not None and replace(entry, digest="") == mine:
            segment = replace(segment, entry=entry)
        elif entry is not None and mine.generation <= entry.generation:
            damage = f"its footer ({mine}) disagrees with its manifest entry ({entry})"
            segment = Segment(entry, segment.path, damage=damage)
        else:
            same = by_version.get((mine.first_offset, mine.last_offset, mine.generation))
            if same is not None and replace(same, digest="", staged=mine.staged) == mine:
                digest = same.digest
            else:
                digest = file_digest(segment.path)
            segment = replace(segment, entry=replace(mine, digest=digest))
        matched.append(segment)
    return matched


def _missing(
    directory: Path, found: list[Segment], recorded: Sequence[SegmentEntry]
) -> list[Segment]:
    """The segments the manifest records whose files are gone (and whose offsets no file
    found holds): each keeps its place in the log as damaged, so reads there get DATA_LOSS
    naming the file, the segments around it load, and no append takes its offsets
    (blocking)."""
    held = [(s.first_offset, s.last_offset) for s in found]
    return [
        Segment(entry, directory.parent / entry.file, damage=FILE_MISSING)
        for entry in recorded
        if not (directory.parent / entry.file).exists()
        and not any(a <= entry.last_offset and entry.first_offset <= b for a, b in held)
    ]


def _by_range(segment: Segment) -> tuple[int, int, int]:
    return segment.first_offset, segment.last_offset, segment.generation
