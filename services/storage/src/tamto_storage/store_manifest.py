"""The segment store's manifests: what readers of the store (the `tamto` Spark data source)
plan from, with each object's size and digest, so a corrupt or truncated object is caught.

One manifest per partition, ``<store>/streams/<stream>/_manifest/partition-<p>.json``
(the data directory's manifest format, `tamto_protocol.segment.Manifest`), written
whole by the partition's publisher only, after the objects it lists are committed:
a reader of a manifest finds every object it names. The objects are the truth
(`SegmentStore.committed`); the manifest follows them. A publisher that took over
finds objects its predecessor committed but did not list yet, and describes them
from their bytes (`describe_object`).

Every call here blocks: call through a thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq

from tamto_common.errors import DataLoss
from tamto_protocol.segment import (
    ExpiredFile,
    Manifest,
    SegmentEntry,
    bytes_digest,
    segment_file_name,
)
from tamto_storage.model import PartitionId
from tamto_storage.segment_store import SegmentStore, StoredSegment
from tamto_storage.segments import segment_entry


def describe_object(store: SegmentStore, pid: PartitionId, segment: StoredSegment) -> SegmentEntry:
    """The manifest entry of a committed object, from its bytes (digest) and footer."""
    name = segment_file_name(segment.first_offset, segment.last_offset)
    data = store.read(pid.stream, pid.partition, name)
    try:
        meta = pq.read_metadata(pa.BufferReader(data))
        return segment_entry(
            pid.partition, meta.metadata or {}, len(data), meta.num_rows, digest=bytes_digest(data)
        )
    except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
        where = store.object_location(pid.stream, pid.partition, name)
        raise DataLoss(f"segment object {where} cannot be read: {exc}") from exc


class StoreManifests:
    """Writes the store manifests of the partitions this node publishes."""

    def __init__(self, store: SegmentStore) -> None:
        self._store = store
        #: The manifest last written or read, per partition.
        self._current: dict[PartitionId, Manifest] = {}

    def end(self, pid: PartitionId) -> int | None:
        """Where the segments this node last saw listed for `pid` end."""
        manifest = self._current.get(pid)
        return manifest.end_offsets().get(pid.partition) if manifest is not None else None

    def sync(
        self,
        pid: PartitionId,
        committed: list[StoredSegment],
        known: Mapping[str, SegmentEntry],
        start_offset: int | None = None,
    ) -> Manifest:
        """List exactly the `committed` objects in the partition's manifest; returns it.

        Entries come from the manifest already there, then `known` (what this
        node just committed, by object name), then the object itself.
        `start_offset`: the partition's retention floor, when it moved.
        """
        current = self._current.get(pid) or self._store.read_manifest(pid.stream, pid.partition)
        listed = {segment_file_name(e.first_offset, e.last_offset): e for e in current.segments}
        entries = []
        for segment in committed:
            name = segment_file_name(segment.first_offset, segment.last_offset)
            entry = listed.get(name) or known.get(name)
            if entry is None or entry.size_bytes != segment.size:
                entry = describe_object(self._store, pid, segment)
            entries.append(replace(entry, partition=pid.partition, staged=False))
        starts = dict(current.start_offsets)
        if start_offset is not None:
            starts[pid.partition] = max(starts.get(pid.partition, 0), start_offset)
        if tuple(entries) == current.segments and starts == current.start_offsets:
            self._current[pid] = current
            return current
        new = Manifest(current.version + 1, tuple(entries), starts, current.expired)
        self._store.put_manifest(pid.stream, pid.partition, new)
        self._current[pid] = new
        return new

    def expiring(self, pid: PartitionId, deadlines: Mapping[str, int]) -> dict[str, int]:
        """Make the manifest's ``expired`` list exactly the objects retention removed that
        are still in the store, each with when it is deleted (object name: wall-clock µs,
        `deadlines` for one not listed yet): a deadline already listed is kept, so the
        grace period survives a restart or a new publisher. Returns every deadline."""
        current = self._current.get(pid) or self._store.read_manifest(pid.stream, pid.partition)
        known = {e.file: e.delete_after_us for e in current.expired}
        wanted = {name: known.get(name, at) for name, at in deadlines.items()}
        expired = tuple(ExpiredFile(name, at) for name, at in sorted(wanted.items()))
        if expired != current.expired:
            new = replace(current, version=current.version + 1, expired=expired)
            self._store.put_manifest(pid.stream, pid.partition, new)
            self._current[pid] = new
        return wanted

    def forget(self, stream: str) -> None:
        """Drop what this node remembers of `stream` (deleted)."""
        for pid in [p for p in self._current if p.stream == stream]:
            del self._current[pid]
