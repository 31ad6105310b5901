"""Serving sealed offsets from the segment store: a node's local copy of a segment goes
once the store has committed it, and reads of its range fetch the object into a
bounded local cache instead.

Reclaiming (`reclaim_committed`): every replica, publisher or not, deletes the
local file of each segment the store holds under the same name with the same
size (sealing is deterministic, so the bytes are the same); the segment keeps
its place in the partition's log and manifest. Only plain sealed segments go:
a damaged one, or one rewritten by interest retention, is never in the store
as it is here. Below the store's committed end only.

Reading (`StoreCache.path`): the object is read whole, its size and digest
checked against the segment's manifest entry (a corrupt or truncated object is
DATA_LOSS naming it, never served), written under ``<data-dir>/_store_cache/``
and kept there, least recently used evicted first, within `max_bytes`. A store
that cannot be reached is UNAVAILABLE (the read is retried), not damage.

Blocking functions: call through a thread.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections import OrderedDict
from pathlib import Path

import structlog

from tamto_common.durable import make_dirs, write_atomic
from tamto_common.errors import DataLoss, Unavailable
from tamto_protocol.segment import bytes_digest
from tamto_storage.model import PartitionId
from tamto_storage.segment_store import SegmentStore, StoredSegment
from tamto_storage.segments import Segment

log = structlog.get_logger(__name__)

CACHE_DIR = "_store_cache"


class StoreCache:
    """Local copies of store objects, within a byte budget, least recently used out first."""

    def __init__(self, store: SegmentStore, directory: Path, max_bytes: int) -> None:
        self._store = store
        self._dir = directory
        self._max_bytes = max_bytes
        self._files: OrderedDict[Path, int] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        # What a previous run left is not accounted for: start empty.
        shutil.rmtree(directory, ignore_errors=True)

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def path(self, pid: PartitionId, segment: Segment) -> Path:
        """A local file with the bytes of `segment`'s object in the store (fetched if needed)."""
        target = self._dir / pid.stream / str(pid.partition) / segment.path.name
        with self._lock:
            if target in self._files and target.exists():
                self._files.move_to_end(target)
                return target
        data = self._fetch(pid, segment)
        make_dirs(target.parent)
        write_atomic(target, lambda out: out.write(data))
        with self._lock:
            self._bytes += len(data) - self._files.pop(target, 0)
            self._files[target] = len(data)
            while self._bytes > self._max_bytes and len(self._files) > 1:
                old, size = self._files.popitem(last=False)
                self._bytes -= size
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()
        return target

    def forget(self, stream: str) -> None:
        """Remove the local copies of a deleted stream's objects."""
        doomed = self._dir / stream
        with self._lock:
            for path in [p for p in self._files if doomed in p.parents]:
                self._bytes -= self._files.pop(path)
        shutil.rmtree(doomed, ignore_errors=True)

    def _fetch(self, pid: PartitionId, segment: Segment) -> bytes:
        """The object's bytes, checked against `segment`'s manifest entry."""
        name = segment.path.name
        where = self._store.object_location(pid.stream, pid.partition, name)
        try:
            data = self._store.read(pid.stream, pid.partition, name)
        except FileNotFoundError:
            raise DataLoss(
                f"segment {name} is neither on this node nor in the store ({where})"
            ) from None
        except OSError as exc:
            raise Unavailable(f"segment store unreachable reading {where}: {exc}") from exc
        entry = segment.entry
        if len(data) != entry.size_bytes:
            raise DataLoss(
                f"segment object {where} is {len(data)} bytes; its manifest entry says "
                f"{entry.size_bytes}: truncated or replaced, not served"
            )
        if entry.digest and bytes_digest(data) != entry.digest:
            raise DataLoss(
                f"segment object {where} has digest {bytes_digest(data)}; its manifest entry "
                f"says {entry.digest}: corrupt, not served"
            )
        return data


def reclaimable(local: tuple[Segment, ...], committed: list[StoredSegment]) -> list[Segment]:
    """The local segments whose object the store holds as it is (same range and size)."""
    held = {(s.first_offset, s.last_offset, s.size) for s in committed}
    return [
        s
        for s in local
        if not s.damage
        and not s.generation
        and not s.entry.staged
        and (s.first_offset, s.last_offset, s.entry.size_bytes) in held
        and s.path.exists()
    ]


def reclaim_committed(pid: PartitionId, segments: list[Segment]) -> int:
    """Delete the local files of `segments` (committed in the store); bytes freed."""
    freed = 0
    for segment in segments:
        with contextlib.suppress(FileNotFoundError):
            segment.path.unlink()
            freed += segment.entry.size_bytes
    if segments:
        log.info(
            "local segment copies reclaimed (in the store)",
            partition=str(pid),
            segments=[s.path.name for s in segments],
        )
    return freed
