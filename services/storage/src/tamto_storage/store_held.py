"""What the cluster's segment store holds of a node's partitions, for `tamto storage verify`.

A storage node reclaims its local copy of a segment once the segment store has
committed it (`tamto_storage.store_cache`): the node's manifest still records
the segment, and reads of it go to the store. A check of the node's files alone
would call those offsets missing, and a repair would write them off as lost.
`StoreHeld` tells the check which offset ranges the store holds instead: those
its partition manifest lists (`tamto_storage.store_manifest`) whose object is
committed with the listed size.

Every call here blocks (it reads the store).
"""

from __future__ import annotations

from tamto_protocol.segment import segment_file_name
from tamto_storage.segment_store import SegmentStore


class StoreHeld:
    """The offset ranges a segment store holds, per partition (read once each)."""

    def __init__(self, store: SegmentStore) -> None:
        self._store = store
        self._ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}

    def __call__(self, stream: str, partition: int) -> list[tuple[int, int]]:
        """(first, last) of each segment of the partition the store's manifest lists and
        the store holds whole (its object's size is the listed one), by first offset."""
        key = (stream, partition)
        if key not in self._ranges:
            manifest = self._store.read_manifest(stream, partition)
            sizes = {
                segment_file_name(s.first_offset, s.last_offset): s.size
                for s in self._store.committed(stream, partition)
            }
            self._ranges[key] = sorted(
                (e.first_offset, e.last_offset)
                for e in manifest.for_partition(partition)
                if sizes.get(segment_file_name(e.first_offset, e.last_offset)) == e.size_bytes
            )
        return self._ranges[key]
