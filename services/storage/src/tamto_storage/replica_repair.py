"""Repairing a damaged copy of a partition online, from a healthy replica's entries.

On a replicated stream (R > 1) the partition's owner (the router) learns from a
DATA_LOSS answer which range of this node's copy is damaged (the message names
it: `tamto_common.errors.damaged_offsets`), reads that range from a replica
that reads it intact and sends it here (Storage `RepairRange`, docs/cluster.md
section 2). `install_copy` puts it in place, never over intact data:

- **a damaged sealed segment** (one a read found failing its digest or a page
  CRC, and that fails the check again now): the entries must cover exactly its
  range. They are written as a segment under ``partition=<p>/_repair/``,
  checked there as `tamto storage verify` checks a segment (the digest taken
  while writing, then every page's CRC by decoding it all), then the damaged
  file moves to ``_damaged/`` and the copy takes its name, its digest goes into
  the manifest, and reads serve it;
- **a damaged WAL frame** (the partition refuses appends from there on): what
  precedes the damage is sealed first, then the entries from the damage to at
  least the end of this node's log are written as segments, checked the same
  way and recorded in the manifest; the damaged WAL file moves to
  ``_damaged/``, the other WAL files (the segments cover them) go, and the WAL
  starts again, empty, where the copy ends (`Partition.restart_wal`). The owner
  then catches the replica up like any lagging one and it takes appends again.

Only the current owner may (the partition's epoch), only damaged sealed
segments of generation 0 (a carried-forward rewrite is repaired offline) and
WAL damage past the sealed range. Each repair is counted
(`tamto_storage_repaired_ranges_total{stream,kind}`), logged, and audited like
`tamto storage repair` (category ``admin``, action ``storage.repair_from_replica``,
in ``<data-dir>/audit.jsonl``). With R = 1 nothing calls this: DATA_LOSS and
the offline repair stay the way back (docs/operations.md, Damaged files).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import structlog

from tamto_common.audit import ADMIN, AuditLog
from tamto_common.durable import fsync_dir, make_dirs
from tamto_common.errors import DataLoss, FailedPrecondition
from tamto_protocol.segment import segment_file_name
from tamto_storage import metrics
from tamto_storage.batch_checks import check_batches
from tamto_storage.integrity import VerifiedFiles
from tamto_storage.model import StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.repair_files import DAMAGED_DIR, move_aside, with_entry
from tamto_storage.scrub import segment_problem
from tamto_storage.segments import Segment, write_segment
from tamto_storage.store import PartitionStore

log = structlog.get_logger(__name__)

#: Where a copy is written and checked before it takes the damaged file's place.
STAGING_DIR = "_repair"


@dataclass(frozen=True, slots=True)
class Installed:
    """What one repair did: the damaged file (now under ``_damaged/``), the offsets
    replaced, and where the partition's log ends."""

    kind: str  # segment | wal
    damaged_file: Path
    first_offset: int
    last_offset: int
    next_offset: int


async def install_copy(
    store: PartitionStore,
    partition: Partition,
    epoch: int,
    first: int,
    batches: Sequence[StoredBatch],
    audit: AuditLog | None = None,
) -> Installed:
    """Replace this node's damaged range starting at `first` by `batches` (see the
    module's docstring); FailedPrecondition when nothing is damaged there or the
    batches do not cover what must be replaced."""
    check_batches(batches)
    if batches[0].base_offset != first:
        raise FailedPrecondition(
            f"the copy starts at {batches[0].base_offset}, the damaged range at {first}"
        )
    sealer = store.sealer
    if sealer is not None:
        async with sealer.round_lock:  # no retention or promotion under the swap
            if partition.wal.corruption is not None:
                await sealer.seal(partition)  # what precedes the WAL damage, first
            installed = await _install(store, partition, epoch, first, batches)
    else:
        installed = await _install(store, partition, epoch, first, batches)
    stream = partition.id.stream
    metrics.REPAIRED_RANGES.labels(stream, installed.kind).inc()
    partition.count_damage()
    what = f"{installed.first_offset}-{installed.last_offset}"
    log.warning(
        "damaged range repaired from a healthy replica",
        partition=str(partition.id),
        kind=installed.kind,
        offsets=what,
        damaged_file=str(installed.damaged_file),
        next_offset=installed.next_offset,
    )
    if audit is not None:
        await audit.record(
            ADMIN,
            actor="router",
            action="storage.repair_from_replica",
            target=f"{installed.kind} {partition.id.stream}/{partition.id.partition}",
            outcome="repaired",
            source="replica",
            detail=(
                f"offsets {what} copied from a healthy replica and checked; the damaged "
                f"file moved to {installed.damaged_file}; nothing lost"
            ),
        )
    return installed


async def _install(
    store: PartitionStore,
    partition: Partition,
    epoch: int,
    first: int,
    batches: Sequence[StoredBatch],
) -> Installed:
    async with partition.seal_lock:
        partition.check_epoch(epoch)
        segment = partition.segment_log.covering(first)
        corruption = partition.wal.corruption
        if segment is not None and segment.first_offset == first:
            return await _install_segment(store, partition, segment, batches)
        if corruption is not None and corruption.offset == first:
            return await _install_wal(store, partition, first, batches)
        raise FailedPrecondition(
            f"partition {partition.id}: nothing known damaged starts at offset {first}"
        )


async def _install_segment(
    store: PartitionStore, partition: Partition, damaged: Segment, batches: Sequence[StoredBatch]
) -> Installed:
    if damaged.path not in partition.segment_log.damaged:
        raise FailedPrecondition(f"segment {damaged.path.name} is not known damaged")
    if damaged.generation or damaged.entry.staged:
        raise FailedPrecondition(
            f"segment {damaged.path.name} is a carried-forward rewrite: repair it offline"
        )
    if batches[-1].end_offset != damaged.end_offset:
        raise FailedPrecondition(
            f"the copy ends at {batches[-1].end_offset}, the damaged segment at "
            f"{damaged.end_offset}"
        )
    # Never over intact data: the file must fail its check now too.
    if not await asyncio.to_thread(segment_problem, damaged, VerifiedFiles()):
        raise FailedPrecondition(f"segment {damaged.path.name} checks out now")
    pdir = partition.directory
    copy = await asyncio.to_thread(_write_checked, partition.id.partition, pdir, batches)
    target = pdir / segment_file_name(damaged.first_offset, damaged.last_offset)
    aside = await asyncio.to_thread(_swap, damaged.path, copy.path, target)
    installed = Segment(copy.entry, target)
    await store.manifest_update(partition.id.stream, lambda m: with_entry(m, installed.entry))
    partition.segment_log.replace([damaged], installed)
    offsets = partition.offsets()
    return Installed(
        "segment", aside, damaged.first_offset, damaged.last_offset, offsets.next_offset
    )


async def _install_wal(
    store: PartitionStore, partition: Partition, first: int, batches: Sequence[StoredBatch]
) -> Installed:
    sealed_end = partition.segment_log.end_offset
    if sealed_end != first:
        raise FailedPrecondition(
            f"partition {partition.id}: sealed up to {sealed_end}, the WAL damage starts at "
            f"{first}; retry once the offsets before it are sealed"
        )
    await partition.wal.settled()
    end = partition.offsets().next_offset
    if batches[-1].end_offset < end:
        raise FailedPrecondition(
            f"the copy ends at {batches[-1].end_offset}, before this node's log end {end}"
        )
    pdir = partition.directory
    written = await asyncio.to_thread(_write_segments_checked, partition, batches)
    for segment in written:
        await store.manifest_update(partition.id.stream, partial(with_entry, entry=segment.entry))
        partition.segment_log.add(segment)
    end = batches[-1].end_offset
    aside = await partition.restart_wal(end, partial(move_aside, folder=pdir / DAMAGED_DIR))
    return Installed("wal", aside, first, end - 1, end)


def _write_checked(number: int, pdir: Path, batches: Sequence[StoredBatch]) -> Segment:
    """The copy as one segment under ``_repair/``, checked as `verify` checks one (blocking)."""
    staging = pdir / STAGING_DIR
    make_dirs(staging)
    segment = write_segment(number, staging, batches)
    problem = segment_problem(segment, VerifiedFiles())
    if problem:
        segment.path.unlink(missing_ok=True)
        raise DataLoss(f"the copy written for repair does not check out: {problem}")
    return segment


def _write_segments_checked(partition: Partition, batches: Sequence[StoredBatch]) -> list[Segment]:
    """The copy sealed into segments of the partition (as the sealer writes them), each
    checked before it is served (blocking)."""
    written = partition.write_segments(batches)
    for segment in written:
        problem = segment_problem(segment, VerifiedFiles())
        if problem:
            raise DataLoss(f"the copy sealed for repair does not check out: {problem}")
    return written


def _swap(damaged: Path, copy: Path, target: Path) -> Path:
    """Move `damaged` to ``_damaged/`` and `copy` to `target`, durably; where the
    damaged file went (blocking)."""
    aside = move_aside(damaged, target.parent / DAMAGED_DIR)
    os.replace(copy, target)
    fsync_dir(copy.parent)
    fsync_dir(target.parent)
    return aside
