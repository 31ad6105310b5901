"""The segment store on a shared directory: one replica publishes each partition, the
store's segments never overlap (even when the publisher changes and the nodes sealed at
different points), a retry writes the same bytes, and the WAL stays until committed."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pyarrow.dataset as ds
import pytest
from storage_testkit import append_batches, wal_files

from tamto_common.errors import InvalidArgument
from tamto_local.ports import free_port
from tamto_local.s3 import S3Spec
from tamto_protocol.segment import segment_file_name
from tamto_storage.iceberg import NAME_MAPPING, IcebergTables
from tamto_storage.metrics import STORE_ERRORS
from tamto_storage.model import PartitionId
from tamto_storage.publisher import Publisher
from tamto_storage.sealer import Sealer, SealOptions
from tamto_storage.segment_store import SegmentStore, StoredSegment, is_data_dir, overlapped
from tamto_storage.store import PartitionStore, partition_dir
from tamto_storage.store_cache import CACHE_DIR, StoreCache
from tamto_storage.wal import WalOptions
from tamto_testing.s3 import s3_server as run_s3_server

PID = PartitionId("orders", 0)


class Node:
    """A storage node's partition store publishing into `store` while `publishes`."""

    def __init__(
        self,
        data: Path,
        store: SegmentStore,
        segment_bytes: int,
        tables: IcebergTables | None = None,
        cache_bytes: int = 0,
    ) -> None:
        """`cache_bytes`: reclaim local copies the store holds, read them back through a
        cache of that size (0: keep them)."""
        self.data = data
        self.publishes = False

        async def designated(stream: str, partition: int) -> bool:
            return self.publishes

        self.cache = StoreCache(store, data / CACHE_DIR, cache_bytes) if cache_bytes else None
        self.publisher = Publisher(store, designated, tables, self.cache)
        self.store = PartitionStore(
            data,
            WalOptions(file_bytes=1),  # a WAL file per batch: trimming is visible
            seal_options=SealOptions(segment_bytes=segment_bytes),
            publisher=self.publisher,
        )

    async def append(self, first: int, last: int) -> None:
        """Append batches of three messages from `first` to `last` (exclusive)."""
        partition = await self.store.get(PID.stream, PID.partition)
        await partition.open(1)
        await append_batches(partition, 1, range(first, last, 3))

    @property
    def sealer(self) -> Sealer:
        """The store's sealer (it has one: the node publishes through it)."""
        sealer = self.store.sealer
        assert sealer is not None
        return sealer

    async def seal(self) -> None:
        await self.sealer.seal_all()

    def wal_starts(self) -> list[int]:
        return [int(f.stem) for f in wal_files(partition_dir(self.data, PID))]


def publishing_node(data: Path, store: SegmentStore, tables: IcebergTables | None = None) -> Node:
    """A node publishing into `store` (a segment per batch) that keeps what retention
    drops there for an hour: the tests end the grace period themselves."""
    node = Node(data, store, segment_bytes=1, tables=tables)
    node.publishes = True
    node.publisher.retention_grace_s = 3600.0
    return node


def offsets_in(store_dir: Path) -> list[int]:
    table = ds.dataset(store_dir / "streams" / "orders", partitioning="hive").to_table()
    return sorted(table.column("offset").to_pylist())


async def test_one_replica_publishes_and_the_others_keep_their_wal_until_it_did(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "store"
    store = SegmentStore.open(shared.as_uri())
    a = Node(tmp_path / "a", store, segment_bytes=1)
    b = Node(tmp_path / "b", store, segment_bytes=1)
    a.publishes = True
    try:
        for node in (a, b):
            await node.append(0, 9)
        await b.seal()  # not the publisher: nothing is committed, its WAL stays whole
        assert store.committed("orders", 0) == []
        assert b.wal_starts() == [0, 3, 6, 9]
        await a.seal()
        assert [(s.first_offset, s.last_offset) for s in store.committed("orders", 0)] == [
            (0, 2),
            (3, 5),
            (6, 8),
        ]
        assert a.wal_starts() == [9]
        await b.seal()  # it reads the committed end now: its sealed WAL files go
        assert b.wal_starts() == [9]
        assert offsets_in(shared) == list(range(9))
        # The committed object is the publisher's sealed file, byte for byte.
        name = segment_file_name(0, 2)
        local = partition_dir(a.data, PID) / name
        assert store.read("orders", 0, name) == local.read_bytes()
    finally:
        for node in (a, b):
            await node.store.close()


async def test_a_new_publisher_continues_where_the_store_ends_without_overlap(
    tmp_path: Path,
) -> None:
    """A seals a segment per batch, B one for everything: B's first segment is cut at the
    store's end, and both nodes cut it to the same bytes."""
    shared = tmp_path / "store"
    store = SegmentStore.open(shared.as_uri())
    a = Node(tmp_path / "a", store, segment_bytes=1)
    b = Node(tmp_path / "b", store, segment_bytes=1 << 30)
    c = Node(tmp_path / "c", SegmentStore.open((tmp_path / "other").as_uri()), 1 << 30)
    try:
        for node in (a, b, c):
            await node.append(0, 6)
        a.publishes = True
        await a.seal()  # 0-2 and 3-5
        for node in (b, c):
            await node.append(6, 15)
        b.publishes = c.publishes = True  # a is gone
        await b.seal()  # sealed 0-14 locally: publishes 6-14 from it
        assert [(s.first_offset, s.last_offset) for s in store.committed("orders", 0)] == [
            (0, 2),
            (3, 5),
            (6, 14),
        ]
        assert offsets_in(shared) == list(range(15))
        # Another node with the same local segment, whose store ends at 6 too, cuts it
        # into the same bytes.
        other = tmp_path / "other" / "streams/orders/partition=0"
        other.mkdir(parents=True)
        for name in (segment_file_name(0, 2), segment_file_name(3, 5)):
            shutil.copy(shared / "streams/orders/partition=0" / name, other / name)
        await c.seal()
        cut = segment_file_name(6, 14)
        assert (other / cut).read_bytes() == store.read("orders", 0, cut)
    finally:
        for node in (a, b, c):
            await node.store.close()


def test_a_store_is_a_file_or_s3_uri(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="use a file:// or s3:// URI"):
        SegmentStore.open("gs://bucket/prefix")
    assert is_data_dir(tmp_path.as_uri(), tmp_path)
    assert not is_data_dir((tmp_path / "store").as_uri(), tmp_path)


async def test_an_s3_store_is_published_to_and_read_by_pyarrow_and_polars(
    tmp_path: Path, s3_server: S3Spec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a real S3 server (SeaweedFS): the publisher's segments, read back by engines
    no one here wrote (and as an Iceberg table), every offset once."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    uri = s3_server.uri(f"segments-{tmp_path.name}")
    store = SegmentStore.open(uri)
    tables = IcebergTables(f"sqlite:///{tmp_path / 'catalog.db'}", store)
    a = Node(tmp_path / "a", store, segment_bytes=1, tables=tables)
    b = Node(tmp_path / "b", store, segment_bytes=1 << 30, tables=tables)
    a.publishes = True
    try:
        for node in (a, b):
            await node.append(0, 9)
            await node.seal()
        assert [s.first_offset for s in store.committed("orders", 0)] == [0, 3, 6]
        assert b.wal_starts() == [9], "committed: the replica's sealed WAL files went"
    finally:
        for node in (a, b):
            await node.store.close()
    table = ds.dataset(
        store.stream_path("orders"),
        filesystem=store.filesystem,
        format="parquet",
        partitioning="hive",
    ).to_table()
    assert sorted(table.column("offset").to_pylist()) == list(range(9))
    assert set(table.column("partition").to_pylist()) == {0}
    frame = pl.scan_parquet(
        f"s3://{store.stream_path('orders')}/**/*.parquet",
        hive_partitioning=True,
        storage_options={
            "aws_endpoint_url": f"http://{s3_server.endpoint}",
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
        },
    ).collect()
    assert sorted(frame["offset"].to_list()) == list(range(9))
    # The Iceberg table's metadata is in the store too, its files the same objects.
    assert table_rows(tables, "orders") == [(0, offset) for offset in range(9)]
    assert all(
        path.startswith(f"s3://{store.stream_path('orders')}/partition=0/segment-")
        for path in tables.table("orders").inspect.files()["file_path"].to_pylist()
    )


async def test_an_unreachable_store_keeps_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listens at the store's address: sealing goes on locally, the WAL stays
    whole, the failure is counted, and the next try waits for the retry interval."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "tamto")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nothing-listens")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = SegmentStore.open(
        f"s3://tamto/segments?endpoint_override=127.0.0.1:{free_port()}&scheme=http"
        "&region=us-east-1"
    )
    node = Node(tmp_path / "a", store, segment_bytes=1)
    node.publishes = True
    errors = STORE_ERRORS._value.get()
    try:
        await node.append(0, 9)
        await node.seal()
        assert node.wal_starts() == [0, 3, 6, 9]
        assert STORE_ERRORS._value.get() == errors + 1
        partition = await node.store.get("orders", 0)
        assert partition.segment_log.end_offset == 9, "sealed locally all the same"
    finally:
        await node.store.close()


def table_rows(tables: IcebergTables, stream: str) -> list[tuple[int, int]]:
    """(partition, offset) of every row PyIceberg reads from the stream's table."""
    table = tables.table(stream).scan().to_arrow()
    return sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))


async def test_committed_segments_are_the_iceberg_table_s_files_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same files, no copy: appended as they are committed, by whichever node
    publishes, never twice (a retry finds them in the table)."""
    shared = tmp_path / "store"
    store = SegmentStore.open(shared.as_uri())
    tables = IcebergTables(f"sqlite:///{tmp_path / 'catalog.db'}", store)
    a = Node(tmp_path / "a", store, segment_bytes=1, tables=tables)
    b = Node(tmp_path / "b", store, segment_bytes=1 << 30, tables=tables)
    try:
        for node in (a, b):
            await node.append(0, 6)
        a.publishes = True
        await a.seal()
        b.publishes, a.publishes = True, False
        await b.append(6, 12)
        await b.seal()  # cuts its local 0-11 at the store's end, 6
    finally:
        for node in (a, b):
            await node.store.close()
    assert table_rows(tables, "orders") == [(0, offset) for offset in range(12)]
    files = tables.table("orders").inspect.files()["file_path"].to_pylist()
    assert sorted(files) == sorted(
        f"file://{shared}/streams/orders/partition=0/{segment_file_name(first, last)}"
        for first, last in ((0, 2), (3, 5), (6, 11))
    ), "the store's own files, not copies"
    assert tables.append("orders", 0, store.committed("orders", 0)) == 0
    assert tables.end("orders", 0) == 12
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # planned by PyIceberg, as said
    frame = pl.scan_iceberg(tables.table("orders")).select("partition", "offset").collect()
    assert sorted(frame.iter_rows()) == [(0, offset) for offset in range(12)]


async def test_sealing_catches_up_when_the_s3_server_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SeaweedFS stops for a while: sealing goes on locally with the WAL kept and the
    failure counted; started again (same data, same ports), the store catches up."""
    spec = S3Spec(data_dir=tmp_path / "seaweedfs")
    for name, value in spec.env().items():
        monkeypatch.setenv(name, value)
    store = SegmentStore.open(spec.uri("outage"))
    node = Node(tmp_path / "a", store, segment_bytes=1)
    node.publishes = True
    try:
        with run_s3_server(tmp_path, spec):
            await node.append(0, 6)
            await node.seal()
            assert [s.first_offset for s in store.committed("orders", 0)] == [0, 3]
        errors = STORE_ERRORS._value.get()
        await node.append(6, 12)
        await node.seal()  # the server is down
        assert STORE_ERRORS._value.get() > errors
        assert node.wal_starts() == [6, 9, 12], "kept from the store's end on"
        with run_s3_server(tmp_path, spec):
            await node.seal()
            assert [s.first_offset for s in store.committed("orders", 0)] == [0, 3, 6, 9]
            assert node.wal_starts() == [12]
    finally:
        await node.store.close()


async def test_of_two_overlapping_segments_two_publishers_wrote_the_shorter_stays(
    tmp_path: Path,
) -> None:
    """A and B both believed they publish (a membership change between their reads of
    etcd), both read the store's end 3, B committed 3-11 and then A 3-5: A removes B's
    3-11 (the rule every node applies: at the same start the shorter stays)."""
    shared = tmp_path / "store"
    store = SegmentStore.open(shared.as_uri())
    a = Node(tmp_path / "a", store, segment_bytes=1)
    b = Node(tmp_path / "b", store, segment_bytes=1 << 30)
    try:
        for node in (a, b):
            await node.append(0, 12)
        a.publishes = True
        await a.seal()
        stored = partition_dir(shared, PID)
        for path in stored.iterdir():
            if path.name != segment_file_name(0, 2):
                path.unlink()  # as if A had committed only 0-2 when both read the end
        a.publishes, b.publishes = False, True
        await b.seal()  # B commits 3-11 (cut from its 0-11)
        a_partition = await a.store.get(PID.stream, PID.partition)
        # A, having read the end 3 before B's commit, commits 3-5 now and wins.
        assert await a.publisher._catch_up(a_partition, 3) == 12
    finally:
        for node in (a, b):
            await node.store.close()
    assert [(s.first_offset, s.last_offset) for s in store.committed("orders", 0)] == [
        (0, 2),
        (3, 5),
        (6, 8),
        (9, 11),
    ]
    assert offsets_in(shared) == list(range(12))


def test_the_overlap_rule() -> None:
    segments = [StoredSegment(0, 2, 1), StoredSegment(3, 11, 1), StoredSegment(3, 5, 1)]
    assert overlapped(segments) == [StoredSegment(3, 11, 1)]
    assert overlapped([StoredSegment(0, 2, 1), StoredSegment(3, 5, 1)]) == []


def test_a_table_left_without_its_name_mapping_gets_it_when_next_loaded(tmp_path: Path) -> None:
    """A publisher killed between creating the table and setting its name mapping (two
    commits): the next publisher's load completes it before adding files."""
    store = SegmentStore.open((tmp_path / "store").as_uri())
    tables = IcebergTables(f"sqlite:///{tmp_path / 'catalog.db'}", store)
    table = tables.table("orders")
    with table.transaction() as tx:
        tx.remove_properties(NAME_MAPPING)
    assert NAME_MAPPING not in tables.catalog.load_table(("tamto", "orders")).properties
    assert NAME_MAPPING in tables.table("orders").properties
