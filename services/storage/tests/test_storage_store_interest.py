"""Interest retention applied to the segment store: leading segments every subscription
acked, dropped whole on the publisher, leave the store's manifest at once (the partition's
start moves past them) and the store after the grace period, as with time retention;
the `tamto` data source's planning then reads each still-needed message once. Nothing
the store has not committed yet is dropped or rewritten."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_storage_segment_store import PID, Node, publishing_node
from test_storage_store_reads import store_of_kind

from tamto_local.s3 import S3Spec
from tamto_protocol.segment import segment_file_name
from tamto_spark.segments import read_table
from tamto_storage.interest import ReclaimLimits
from tamto_storage.model import Cursor
from tamto_storage.reclaim import Reclaimer
from tamto_storage.segment_store import SegmentStore

LIMITS = ReclaimLimits(small_bytes=1, max_run_bytes=1 << 30)


def store_names(store: SegmentStore) -> list[str]:
    return [
        segment_file_name(s.first_offset, s.last_offset)
        for s in store.committed(PID.stream, PID.partition)
    ]


def planned_offsets(location: str) -> list[int]:
    """Offsets the `tamto` data source's planning (from the store manifest) and reads give."""
    return sorted(read_table(location).column("offset").to_pylist())


@pytest.mark.parametrize("kind", ["directory", "s3"])
async def test_segments_interest_retention_dropped_leave_the_store_after_the_grace_period(
    tmp_path: Path, kind: str, s3_server: S3Spec, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"interest-{tmp_path.name}"
    store, location = store_of_kind(kind, prefix, PID.stream, tmp_path, s3_server, monkeypatch)
    node = publishing_node(tmp_path / "a", store)
    sealer = node.sealer
    try:
        await node.append(0, 12)  # four segments: 0-2, 3-5, 6-8, 9-11
        await node.seal()
        assert len(store_names(store)) == 4
        partition = await node.store.get(PID.stream, PID.partition)
        # Offsets 0-6 acked: the first two segments go whole; 6-8 is mostly needed.
        await partition.commit_cursor(1, "billing", Cursor(7))
        reclaimer = Reclaimer(
            node.store.manifest_update, LIMITS, 0.0, published=node.publisher.committed_end
        )
        plan = await reclaimer.reclaim(partition)
        assert [s.first_offset for s in plan.drop] == [0, 3]
        assert plan.rewrites == ()
        await sealer.publish_all()

        manifest = store.read_manifest(PID.stream, PID.partition)
        assert [e.first_offset for e in manifest.segments] == [6, 9]
        assert manifest.start_offsets == {PID.partition: 6}
        assert [e.file for e in manifest.expired] == [
            segment_file_name(0, 2),
            segment_file_name(3, 5),
        ]
        assert len(store_names(store)) == 4, "kept for the grace period"
        assert planned_offsets(location) == list(range(6, 12))

        for key in list(node.publisher._doomed):
            node.publisher._doomed[key] = 0.0  # the grace period is over
        await sealer.publish_all()
        assert store_names(store) == [segment_file_name(6, 8), segment_file_name(9, 11)]
        assert store.read_manifest(PID.stream, PID.partition).expired == ()
        assert planned_offsets(location) == list(range(6, 12))
    finally:
        await node.store.close()


async def test_interest_retention_leaves_segments_the_store_lacks_alone(tmp_path: Path) -> None:
    """The store unreachable, or the publisher behind: acked segments stay on the node
    until the store has them, then go (the store never misses a range)."""
    store = SegmentStore.open((tmp_path / "store").as_uri())
    node = Node(tmp_path / "a", store, segment_bytes=1)  # not the publisher yet
    sealer = node.sealer
    try:
        await node.append(0, 12)
        await node.seal()
        assert store_names(store) == []
        partition = await node.store.get(PID.stream, PID.partition)
        await partition.commit_cursor(1, "billing", Cursor(7))
        reclaimer = Reclaimer(
            node.store.manifest_update, LIMITS, 0.0, published=node.publisher.committed_end
        )
        assert not await reclaimer.reclaim(partition)
        assert [s.first_offset for s in partition.segment_log.segments] == [0, 3, 6, 9]

        node.publishes = True
        await sealer.publish_all()
        assert len(store_names(store)) == 4
        plan = await reclaimer.reclaim(partition)
        assert [s.first_offset for s in plan.drop] == [0, 3]
        assert partition.segment_log.floor == 6
    finally:
        await node.store.close()
