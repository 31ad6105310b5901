"""Retention applied to the segment store: segments below the publisher's retention floor
leave the store's manifest and the stream's Iceberg table (whole files) at once, and the
store after the grace period; the store goes on from where the partition's log is."""

from __future__ import annotations

import time
from pathlib import Path

from storage_testkit import payload_for
from test_storage_segment_store import PID, Node, publishing_node

from tamto_protocol.segment import segment_file_name
from tamto_storage.iceberg import IcebergTables
from tamto_storage.segment_store import SegmentStore


def table_offsets(tables: IcebergTables) -> list[int]:
    return sorted(tables.table(PID.stream).scan().to_arrow().column("offset").to_pylist())


def store_names(store: SegmentStore) -> list[str]:
    return [
        segment_file_name(s.first_offset, s.last_offset)
        for s in store.committed(PID.stream, PID.partition)
    ]


async def test_retention_removes_expired_objects_from_the_manifest_the_table_and_the_store(
    tmp_path: Path,
) -> None:
    store = SegmentStore.open((tmp_path / "store").as_uri())
    tables = IcebergTables(f"sqlite:///{tmp_path / 'iceberg.db'}", store)
    node = publishing_node(tmp_path / "a", store, tables)
    sealer = node.sealer
    try:
        await node.append(0, 12)
        await node.seal()
        assert table_offsets(tables) == list(range(12))
        partition = await node.store.get(PID.stream, PID.partition)
        two = sum(s.entry.size_bytes for s in partition.segment_log.segments[2:])
        await sealer.expire(partition, int(time.time() * 1e6), 0, two)  # the first two go
        assert partition.segment_log.floor == 6
        await sealer.publish_all()

        manifest = store.read_manifest(PID.stream, PID.partition)
        assert [e.first_offset for e in manifest.segments] == [6, 9]
        assert manifest.start_offsets == {0: 6}
        assert table_offsets(tables) == list(range(6, 12))
        # Still in the store for the grace period (a job that planned them reads them).
        assert len(store_names(store)) == 4

        node.publisher.retention_grace_s = 0.0
        for key in list(node.publisher._doomed):
            node.publisher._doomed[key] = 0.0  # the grace period is over
        await sealer.publish_all()
        assert store_names(store) == [segment_file_name(6, 8), segment_file_name(9, 11)]

        await node.append(12, 15)  # the store goes on from the log's end
        await node.seal()
        assert store_names(store)[-1] == segment_file_name(12, 14)
        assert table_offsets(tables) == list(range(6, 15))
        result = await partition.read(6, 0, 1 << 20)
        assert result.batches[0].base_offset == 6
        assert payload_for(6) in result.batches[0].arrow_ipc
    finally:
        await node.store.close()


async def test_the_grace_period_is_kept_in_the_store_manifest_across_a_restart(
    tmp_path: Path,
) -> None:
    store = SegmentStore.open((tmp_path / "store").as_uri())
    node = publishing_node(tmp_path / "a", store)
    sealer = node.sealer
    try:
        await node.append(0, 12)
        await node.seal()
        partition = await node.store.get(PID.stream, PID.partition)
        two = sum(s.entry.size_bytes for s in partition.segment_log.segments[2:])
        started = time.time()
        await sealer.expire(partition, int(started * 1e6), 0, two)  # the first two go
        await sealer.publish_all()
        listed = store.read_manifest(PID.stream, PID.partition).expired
        assert [e.file for e in listed] == [segment_file_name(0, 2), segment_file_name(3, 5)]
        assert all(e.delete_after_us >= (started + 3600) * 1e6 for e in listed)
    finally:
        await node.store.close()

    # Restarted with no grace of its own: the deadlines in the store's manifest hold.
    again = Node(tmp_path / "a", store, segment_bytes=1)
    again.publishes = True
    again.publisher.retention_grace_s = 0.0
    sealer = again.sealer
    try:
        await again.store.get(PID.stream, PID.partition)
        await sealer.publish_all()
        assert len(store_names(store)) == 4
        for key in list(again.publisher._doomed):
            again.publisher._doomed[key] = 0.0  # the grace period is over
        await sealer.publish_all()
        assert store_names(store) == [segment_file_name(6, 8), segment_file_name(9, 11)]
        assert store.read_manifest(PID.stream, PID.partition).expired == ()
    finally:
        await again.store.close()
