"""The files of a sealed truncation (`tamto_storage.sealed_truncate`) on disk: where its
rewrite of a segment waits, how it takes its place, and how a load finishes or undoes
one a crash interrupted. Apart so `Partition.load` can call it without importing the
truncation, which needs the partition."""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from tamto_common.durable import fsync_dir
from tamto_protocol.segment import parse_segment_name

log = structlog.get_logger(__name__)

#: Where the rewrite of the segment holding the new end waits to take its place.
STAGING_DIR = "_truncate"


def move_into_place(staged: Path, target: Path) -> None:
    """Rename `staged` to `target`, durably (blocking)."""
    os.replace(staged, target)
    fsync_dir(staged.parent)
    fsync_dir(target.parent)


def finish_interrupted(pdir: Path) -> None:
    """Finish or undo a sealed truncation a crash interrupted (blocking, at load): a
    staged rewrite takes its place once the segment it replaces (same first offset) is
    gone, and is deleted while that is still there."""
    staging = pdir / STAGING_DIR
    if not staging.is_dir():
        return
    on_disk = {p.name: parse_segment_name(p.name) for p in pdir.iterdir() if p.is_file()}
    for staged in sorted(staging.iterdir()):
        bounds = parse_segment_name(staged.name)
        if bounds is None:
            continue
        replaced = [n for n, b in on_disk.items() if b and b[0] == bounds[0] and n != staged.name]
        if replaced:
            staged.unlink()
            fsync_dir(staging)
        else:
            move_into_place(staged, pdir / staged.name)
            log.warning("finished an interrupted sealed truncation", segment=staged.name)
