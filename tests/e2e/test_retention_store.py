"""Interest retention with a segment store (a directory store, one node): once the only
subscription acked everything but one message, the leading segments it acked leave the
store's manifest and, after the grace period, the store; the unacked message is still
read exactly once through the `tamto` data source's planning (docs/segments.md,
"Retention in the store")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tamto_sdk
import tamto_sdk.stream_config
from tamto_protocol.segment import parse_segment_name, read_manifest
from tamto_spark.segments import read_table
from tamto_storage.segment_store import SegmentStore
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually
from tests.e2e.test_retention import consume_all_but_one

pytestmark = pytest.mark.e2e

TOTAL = 3000
BATCH = 100
#: The message left unacknowledged, in the middle: what comes before it goes whole.
KEPT = 1650
SETTINGS = {
    "TAMTO_STORAGE_SEAL_AGE_MS": "200",
    "TAMTO_STORAGE_SEAL_CHECK_MS": "100",
    "TAMTO_STORAGE_SEGMENT_BYTES": str(16 << 10),
    "TAMTO_STORAGE_RETENTION_GRACE_MS": "500",
}


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def cluster(tamto_infra: Infra, tmp_path: Path, store_dir: Path) -> Iterator[TestCluster]:
    env = {**SETTINGS, "TAMTO_STORAGE_SEGMENT_STORE": f"file://{store_dir}"}
    with TestCluster(tmp_path / "cluster", tamto_infra, storage_env=env).running() as c:
        yield c


def objects(store_dir: Path, stream: str) -> list[tuple[int, int]]:
    """(first, last) offsets of the store's segment objects of `stream`, partition 0."""
    found = (parse_segment_name(p.name) for p in (store_dir / "streams" / stream).glob("*/*"))
    return sorted(bounds for bounds in found if bounds is not None)


async def publish(client: tamto_sdk.Client, stream: str) -> None:
    async with client.producer(stream, max_batch_messages=BATCH) as producer:
        for i in range(TOTAL):
            await producer.send(b"m%07d" % i)
        await producer.flush()


async def test_acked_leading_segments_leave_the_store_and_the_unacked_one_stays(
    cluster: TestCluster, store_dir: Path
) -> None:
    stream = f"interest-{uuid.uuid4().hex[:8]}"
    store = SegmentStore.open(store_dir.as_uri())
    config = tamto_sdk.StreamConfig(
        retention_policy=tamto_sdk.stream_config.RetentionPolicy.INTEREST,
        ack_timeout_ms=600_000,  # the unacked message is not redelivered during the test
    )
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(stream, partitions=1, config=config)
        await publish(client, stream)

        async def published() -> bool:
            ends = store.read_manifest(stream, 0).end_offsets()
            return ends.get(0, 0) >= TOTAL

        await eventually(published, 30, "every message in the store", interval_s=0.05)
        before = objects(store_dir, stream)
        assert before[0][0] == 0
        assert len(before) >= 4, f"several segments, so whole ones can go: {before}"
        assert await consume_all_but_one(client, stream, TOTAL, KEPT, BATCH) == TOTAL

    [node] = cluster.storages()
    local = cluster.data_dir(node) / "streams" / stream

    async def settled() -> bool:
        """The node's log starts with the segment holding KEPT: it never goes."""
        first = read_manifest(local).segments[0]
        return first.first_offset <= KEPT <= first.last_offset

    await eventually(settled, 30, "leading acked segments dropped on the node", interval_s=0.05)
    holding = read_manifest(local).segments[0].first_offset
    assert holding > 0
    assert holding in [first for first, _ in before], "drops are whole store objects"

    async def dropped() -> bool:
        listed = store.read_manifest(stream, 0)
        return (
            listed.start_offsets.get(0) == holding
            and not listed.expired
            and objects(store_dir, stream)[0][0] == holding
        )

    await eventually(dropped, 30, f"objects below {holding} gone from the store", interval_s=0.05)
    manifest = store.read_manifest(stream, 0)
    assert manifest.segments[0].first_offset == holding
    assert objects(store_dir, stream) == [b for b in before if b[0] >= holding]
    offsets = read_table(f"{store.uri}/streams/{stream}").column("offset").to_pylist()
    assert offsets.count(KEPT) == 1, "the unacked message is read exactly once"
    assert min(offsets) == holding, "nothing below the partition's start is read"
    assert len(offsets) == len(set(offsets)) == TOTAL - holding
