"""Truncating a replica's unacknowledged tail where its node already sealed it.

A replica that missed a recovery keeps entries past the end the recovery closed
the ledger at (docs/cluster.md section 2); `Partition.truncate` drops them from
the WAL, but refuses offsets sealed into local segments. Asked with
``drop_sealed`` (Storage `TruncatePartition`), `truncate_sealed` drops those
too, so with no spare node the replica heals in place:

- the local segments wholly at or after `next_offset` go, and the one holding
  it is rewritten keeping only its rows below (named as sealing names a
  segment, ``segment-<first>-<next_offset - 1>``, so any node cutting the same
  rows writes the same file);
- the WAL ends at `next_offset`: cut there while it holds that offset,
  started again, empty, there otherwise (`Partition.end_log_at`);
- the stream's manifest records the change, and the dropped files go.

Refused (FAILED_PRECONDITION, saying why) as `Partition.truncate` refuses (a
stale epoch, a WAL entry written with the current epoch: segments do not
record epochs, so sealed rows cannot be checked for it; an offset inside a
batch, where a batch in a segment is a run of rows of one publish time), below
the partition's start, and, with "are sealed" in the message so the owner
replaces the replica by a spare instead, where the segments cannot be cut
here: one the segment store already committed (its end is past `next_offset`,
or a local file to cut was reclaimed), a damaged one, or a carried-forward
rewrite.

Crash safety: the rewritten segment is written under ``_truncate/`` first;
then the WAL is cut, the manifest updated, the later files removed, the old
segment holding `next_offset` removed last, and the rewrite moved into place.
`finish_interrupted` (at load) moves a staged rewrite into place once the file
it replaces is gone and deletes it otherwise; a load that finds the old
segments still there restarts the WAL at their end (`Partition.load`), so the
stale tail is back whole and the owner truncates it again.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from tamto_common.durable import make_dirs
from tamto_common.errors import FailedPrecondition, InvalidArgument, Unavailable
from tamto_protocol.segment import Manifest
from tamto_storage.model import StoredBatch
from tamto_storage.partition import Partition, remove_files
from tamto_storage.sealed_truncate_files import STAGING_DIR, move_into_place
from tamto_storage.segment_reads import read_rows, to_stored_batches
from tamto_storage.segments import Segment, write_segment
from tamto_storage.store import PartitionStore

log = structlog.get_logger(__name__)

_ALL_BYTES = 1 << 62


@dataclass(frozen=True, slots=True)
class _Cut:
    """What a sealed truncation changes: the segments whose files go (the one holding
    the new end first, if any), and its rewrite (staged), if any."""

    dropped: list[Segment]
    rewritten: Segment | None


async def truncate_sealed(
    store: PartitionStore, partition: Partition, epoch: int, next_offset: int
) -> int:
    """Drop `partition`'s entries from `next_offset` on, sealed ones included (see the
    module's docstring); the log's end afterwards."""
    partition.check_epoch(epoch)
    if next_offset < 0:
        raise InvalidArgument(f"next_offset must not be negative, got {next_offset}")
    if next_offset >= max(partition.segment_log.end_offset, partition.wal.start_offset):
        return await partition.truncate(epoch, next_offset)  # nothing sealed goes
    async with contextlib.AsyncExitStack() as stack:
        if store.sealer is not None:  # no retention, publishing or promotion meanwhile
            await stack.enter_async_context(store.sealer.round_lock)
        await stack.enter_async_context(partition.seal_lock)
        await partition.wal.settled()
        partition.check_epoch(epoch)
        end = partition.offsets().next_offset
        if next_offset >= end:
            return end
        cut = await _plan(store, partition, epoch, next_offset)
        await _apply(store, partition, next_offset, cut)
    log.warning(
        "truncated the log's sealed tail for its owner",
        partition=str(partition.id),
        epoch=epoch,
        next_offset=next_offset,
        dropped_segments=[s.path.name for s in cut.dropped],
        rewritten=cut.rewritten.path.name if cut.rewritten else None,
    )
    return partition.wal.next_offset


async def _plan(store: PartitionStore, partition: Partition, epoch: int, next_offset: int) -> _Cut:
    """Check that the tail from `next_offset` may go; the segments to cut, the rewrite
    staged (the caller holds the seal lock)."""
    pid, wal = partition.id, partition.wal
    refused = f"cannot truncate {pid} to {next_offset}"
    if wal.corruption is not None:
        raise FailedPrecondition(f"{refused}: its WAL is damaged ({wal.corruption.error()})")
    start = partition.offsets().start_offset
    if next_offset < start:
        raise FailedPrecondition(f"{refused}: the partition starts at {start}")
    own = [e for e in wal.entries_from(max(next_offset, wal.start_offset)) if e.epoch >= epoch]
    if own:
        raise FailedPrecondition(
            f"{refused}: offset {own[0].base_offset} was written with the current epoch {epoch}"
        )
    held = wal.entries_from(next_offset) if wal.start_offset <= next_offset else []
    if held and held[0].base_offset != next_offset:
        raise FailedPrecondition(f"{refused}: offset {next_offset} is inside a batch")
    going = [s for s in partition.segment_log.segments if s.end_offset > next_offset]
    for segment in going:
        why = _uncuttable(segment)
        if why:
            raise FailedPrecondition(f"{refused}: offsets below {segment.end_offset} are {why}")
    await _check_store(store, partition, next_offset, refused)
    if not going or going[0].first_offset >= next_offset:
        return _Cut(going, None)
    holding = going[0]
    kept = await asyncio.to_thread(_rows_below, holding, next_offset, bool(held))
    if kept is None:
        raise FailedPrecondition(f"{refused}: offset {next_offset} is inside a batch")
    staged = await asyncio.to_thread(_stage, pid.partition, partition.directory, kept)
    return _Cut(going, staged)


def _uncuttable(segment: Segment) -> str | None:
    """Why `segment` cannot be cut here (None: it can)."""
    if segment.damage:
        return f"sealed in a damaged segment ({segment.path.name}: {segment.damage})"
    if segment.generation or segment.entry.staged:
        return f"sealed in a carried-forward rewrite ({segment.path.name})"
    if not segment.path.exists():
        return (
            f"sealed and committed to the segment store (the local file of "
            f"{segment.path.name} was reclaimed)"
        )
    return None


async def _check_store(
    store: PartitionStore, partition: Partition, next_offset: int, refused: str
) -> None:
    """Refuse when the cluster's segment store committed offsets at or past `next_offset`:
    every node serves them from there, so this node's copy cannot differ."""
    publisher = store.publisher
    if publisher is None:
        return
    pid = partition.id
    try:
        end = await asyncio.to_thread(publisher.store.committed_end, pid.stream, pid.partition)
    except OSError as exc:
        raise Unavailable(f"{refused}: the segment store cannot be read: {exc}") from exc
    if end is not None and end > next_offset:
        raise FailedPrecondition(
            f"{refused}: offsets below {end} are sealed and committed to the segment store"
        )


def _rows_below(
    segment: Segment, next_offset: int, boundary_checked: bool
) -> list[StoredBatch] | None:
    """`segment`'s rows below `next_offset`, as batches; None when `next_offset` is inside
    a batch (blocking). A segment keeps no batch boundaries, only runs of one publish
    time: unless the WAL still holds the offset (and `boundary_checked` says its batches
    had one there), the cut must fall between two runs, as the owner read them there."""
    rows = read_rows(segment.path, segment.first_offset, 0, _ALL_BYTES)
    if not boundary_checked:
        ends = {b.end_offset for b in to_stored_batches(rows)}
        if next_offset not in ends:
            return None
    return to_stored_batches(rows.slice(0, next_offset - segment.first_offset))


def _stage(number: int, pdir: Path, batches: list[StoredBatch]) -> Segment:
    """The rewrite under ``_truncate/``, as a segment named for its final place (blocking)."""
    staging = pdir / STAGING_DIR
    make_dirs(staging)
    return write_segment(number, staging, batches)


async def _apply(store: PartitionStore, partition: Partition, next_offset: int, cut: _Cut) -> None:
    """Make the cut: WAL, manifest, the partition's segment log, then the files."""
    pid = partition.id
    target = partition.directory / cut.rewritten.path.name if cut.rewritten else None
    rewritten = Segment(cut.rewritten.entry, target) if cut.rewritten and target else None
    await partition.end_log_at(next_offset)
    gone = {s.entry.file for s in cut.dropped}

    added = (rewritten.entry,) if rewritten else ()

    def change(manifest: Manifest) -> Manifest:
        kept = tuple(s for s in manifest.segments if s.file not in gone)
        return replace(manifest, segments=(*kept, *added))

    await store.manifest_update(pid.stream, change)
    partition.segment_log.cut(next_offset, rewritten)
    later = [s.path for s in cut.dropped if s.first_offset >= next_offset]
    holding = [s.path for s in cut.dropped if s.first_offset < next_offset]
    await asyncio.to_thread(remove_files, later)
    await asyncio.to_thread(remove_files, holding)  # last: see `finish_interrupted`
    if cut.rewritten is not None and target is not None:
        await asyncio.to_thread(move_into_place, cut.rewritten.path, target)
