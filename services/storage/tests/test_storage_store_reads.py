"""Sealed offsets served from the segment store: local copies go once the store committed
them, reads fetch the objects into a bounded cache (least recently used out first), a
corrupt or truncated object is DATA_LOSS naming it, and the store's manifest lists every
committed object with its size and digest."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from storage_testkit import payload_for
from test_storage_segment_store import PID, Node

from tamto_common.errors import DataLoss
from tamto_local.s3 import ACCESS_KEY, SECRET_KEY, S3Spec
from tamto_protocol.batch import decode_batch
from tamto_protocol.segment import bytes_digest, segment_file_name
from tamto_spark.segments import SegmentDamaged, read_table
from tamto_storage.carry import write_carried
from tamto_storage.interest import Rewrite
from tamto_storage.partition import Partition
from tamto_storage.segment_store import SegmentStore
from tamto_storage.store import partition_dir

#: Four segments of three messages each (segment_bytes=1 seals a batch per segment).
END = 12


async def read_all(partition: Partition, start: int = 0) -> list[bytes]:
    """Every payload from `start` to `END`, read by offset as a consumer reads."""
    payloads: list[bytes] = []
    offset = start
    while offset < END:
        result = await partition.read(offset, 0, 1 << 20)
        for batch in result.batches:
            payloads += decode_batch(batch.arrow_ipc).column("payload").to_pylist()
        offset = result.next_offset
    return payloads


def local_segments(node: Node) -> list[str]:
    return sorted(p.name for p in partition_dir(node.data, PID).glob("segment-*.parquet"))


def object_bytes(shared: Path, first: int, last: int) -> Path:
    return partition_dir(shared, PID) / segment_file_name(first, last)


async def sealed_pair(tmp_path: Path, cache_bytes: int) -> tuple[SegmentStore, Node, Node]:
    """A publisher and a replica that both sealed and committed offsets 0-11."""
    store = SegmentStore.open((tmp_path / "store").as_uri())
    a = Node(tmp_path / "a", store, segment_bytes=1, cache_bytes=cache_bytes)
    b = Node(tmp_path / "b", store, segment_bytes=1, cache_bytes=cache_bytes)
    a.publishes = True
    for node in (a, b):
        await node.append(0, END)
    await a.seal()
    await b.seal()
    return store, a, b


async def test_a_reclaimed_segment_is_read_from_the_store_through_a_bounded_cache(
    tmp_path: Path,
) -> None:
    segment_size = object_bytes_size = 0
    store, a, b = await sealed_pair(tmp_path, cache_bytes=1)
    try:
        object_bytes_size = object_bytes(tmp_path / "store", 9, 11).stat().st_size
        for node in (a, b):  # the publisher and the replica both let their copies go
            assert local_segments(node) == []
            partition = await node.store.get(PID.stream, PID.partition)
            assert partition.wal.start_offset == END  # nor is the WAL kept for them
            assert await read_all(partition) == [payload_for(o) for o in range(END)]
            assert node.cache is not None
            segment_size = node.cache.cached_bytes
            # A budget below one object keeps only the object read last.
            cached = list((node.data / "_store_cache").rglob("segment-*.parquet"))
            assert [p.name for p in cached] == [segment_file_name(9, 11)]
    finally:
        for node in (a, b):
            await node.store.close()
    assert segment_size == object_bytes_size

    # Restarted, the node knows the segments from its manifest and reads them from the store.
    again = Node(tmp_path / "a", store, segment_bytes=1, cache_bytes=1 << 20)
    try:
        partition = await again.store.get(PID.stream, PID.partition)
        assert partition.damage() == []
        assert await read_all(partition, 3) == [payload_for(o) for o in range(3, END)]
    finally:
        await again.store.close()


async def test_without_a_cache_the_local_copies_stay(tmp_path: Path) -> None:
    _, a, b = await sealed_pair(tmp_path, cache_bytes=0)
    try:
        assert len(local_segments(a)) == len(local_segments(b)) == 4
    finally:
        for node in (a, b):
            await node.store.close()


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
async def test_a_corrupt_or_truncated_object_is_data_loss_naming_it(
    tmp_path: Path, damage: str
) -> None:
    _, a, b = await sealed_pair(tmp_path, cache_bytes=1 << 20)
    target = object_bytes(tmp_path / "store", 3, 5)
    data = bytearray(target.read_bytes())
    if damage == "flipped":
        data[len(data) // 2] ^= 0x40
    else:
        data = data[: len(data) - 7]
    target.write_bytes(bytes(data))
    try:
        partition = await b.store.get(PID.stream, PID.partition)
        with pytest.raises(DataLoss, match=segment_file_name(3, 5)) as caught:
            await read_all(partition, 3)
        assert ("digest" if damage == "flipped" else "bytes") in str(caught.value)
        assert str(target) in str(caught.value)
        # The offsets around it are still served.
        result = await partition.read(6, 0, 1 << 20)
        assert result.batches[0].base_offset == 6
    finally:
        for node in (a, b):
            await node.store.close()


async def test_the_store_manifest_lists_every_object_with_its_size_and_digest(
    tmp_path: Path,
) -> None:
    store, a, b = await sealed_pair(tmp_path, cache_bytes=0)
    try:
        # B takes over and publishes more: its manifest keeps A's entries and adds its own.
        a.publishes, b.publishes = False, True
        for node in (a, b):
            await node.append(END, END + 3)
        await b.seal()
        await a.seal()
    finally:
        for node in (a, b):
            await node.store.close()
    manifest = store.read_manifest(PID.stream, PID.partition)
    committed = store.committed(PID.stream, PID.partition)
    assert [(e.first_offset, e.last_offset) for e in manifest.segments] == [
        (s.first_offset, s.last_offset) for s in committed
    ]
    assert manifest.end_offsets() == {0: END + 3}
    for entry in manifest.segments:
        data = object_bytes(tmp_path / "store", entry.first_offset, entry.last_offset)
        assert entry.size_bytes == data.stat().st_size
        assert entry.digest == bytes_digest(data.read_bytes())
        assert entry.rows == entry.last_offset - entry.first_offset + 1


def tamto_rows(where: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, payload) of every row the `tamto` data source's planning and
    executors' reads give at `where` (without a JVM)."""
    table = read_table(where)
    columns = (table.column(c).to_pylist() for c in ("partition", "offset", "payload"))
    return sorted(zip(*columns, strict=True))


def store_of_kind(
    kind: str,
    prefix: str,
    stream: str,
    tmp_path: Path,
    s3_server: S3Spec,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[SegmentStore, str]:
    """A segment store of `kind` ("directory" or "s3", under `prefix`) and where a reader
    finds `stream` in it; for S3 the environment gets the server's credentials."""
    if kind != "s3":
        store = SegmentStore.open((tmp_path / "store").as_uri())
        return store, f"{store.uri}/streams/{stream}"
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    store = SegmentStore.open(s3_server.uri(prefix))
    # Credentials in the URI: a Spark executor need not have them in its environment.
    location = s3_server.uri(f"{prefix}/streams/{stream}")
    return store, location.replace("s3://", f"s3://{ACCESS_KEY}:{SECRET_KEY}@")


@pytest.mark.parametrize("kind", ["directory", "s3"])
async def test_the_tamto_source_plans_from_the_store_manifest_and_refuses_damaged_objects(
    tmp_path: Path, kind: str, s3_server: S3Spec, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, location = store_of_kind(
        kind, f"reads-{tmp_path.name}", "orders", tmp_path, s3_server, monkeypatch
    )
    a = Node(tmp_path / "a", store, segment_bytes=1)
    a.publishes = True
    try:
        await a.append(0, END)
        await a.seal()
    finally:
        await a.store.close()
    assert tamto_rows(location) == [(0, o, payload_for(o)) for o in range(END)]

    name = segment_file_name(3, 5)
    data = store.read(PID.stream, PID.partition, name)
    store.put(PID.stream, PID.partition, name, lambda out: out.write(data[:-9]))
    with pytest.raises(SegmentDamaged, match=f"DATA_LOSS: segment .*{name} is") as caught:
        tamto_rows(location)
    assert SECRET_KEY not in str(caught.value)
    flipped = bytearray(data)
    flipped[100] ^= 0x01
    store.put(PID.stream, PID.partition, name, lambda out: out.write(bytes(flipped)))
    with pytest.raises(SegmentDamaged, match=f"DATA_LOSS: segment .*{name} has digest"):
        tamto_rows(location)


async def test_interest_retention_carries_rows_forward_from_a_reclaimed_segment(
    tmp_path: Path,
) -> None:
    """A segment whose local copy went is still rewritten by interest retention: its
    rows come from the store (through the cache)."""
    _, a, b = await sealed_pair(tmp_path, cache_bytes=1 << 20)
    try:
        partition = await b.store.get(PID.stream, PID.partition)
        first = partition.segment_log.segments[0]
        assert not first.path.exists()
        rewrite = Rewrite(members=(first,), keep=((1, 3),))
        carried = await asyncio.to_thread(
            write_carried, 0, partition.directory, rewrite, partition.segment_log.local_path
        )
        rows = pq.read_table(carried.path).column("payload").to_pylist()
        assert rows == [payload_for(1), payload_for(2)]
    finally:
        for node in (a, b):
            await node.store.close()
