"""The reaper of deleted streams, against a real etcd and a real store (a directory, and
SeaweedFS for S3): nothing is removed during the grace period; after it the node's copy,
the store's objects, the Iceberg table and the stream's etcd keys go, and the deletion
record goes once every node it names removed its copy."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import aetcd
import pyarrow.fs as pafs
import pytest
from pyiceberg.exceptions import NoSuchTableError
from storage_testkit import make_batch
from test_storage_segment_store import Node

from tamto_common.deletions import StreamDeletion, deletion_key, stream_prefixes
from tamto_common.ledgers import ledgers_key
from tamto_local.s3 import S3Spec
from tamto_storage.iceberg import NAMESPACE, IcebergTables
from tamto_storage.reaper import StreamReaper
from tamto_storage.segment_store import SegmentStore

GRACE_S = 60.0


@pytest.fixture(params=["file", "s3"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> SegmentStore:
    if request.param == "file":
        return SegmentStore.open((tmp_path / "store").as_uri())
    s3: S3Spec = request.getfixturevalue("s3_server")
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return SegmentStore.open(s3.uri(f"reaper-{tmp_path.name}"))


async def etcd_keys(etcd: aetcd.Client, stream: str) -> list[bytes]:
    return [kv.key for prefix in stream_prefixes(stream) for kv in await etcd.get_prefix(prefix)]


def exists(store: SegmentStore, path: str) -> bool:
    """Whether any object is under `path` (an emptied S3 prefix may still look like a
    directory on SeaweedFS, with nothing in it)."""
    selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
    return any(i.type == pafs.FileType.File for i in store.filesystem.get_file_info(selector))


async def test_a_deleted_stream_is_removed_once_its_grace_period_has_passed(
    store: SegmentStore, tmp_path: Path, etcd_client: aetcd.Client
) -> None:
    stream = f"reap{uuid.uuid4().hex[:8]}"  # the session's etcd is shared
    tables = IcebergTables(f"sqlite:///{tmp_path / 'catalog.db'}", store)
    node = Node(tmp_path / "a", store, segment_bytes=1, tables=tables, cache_bytes=1 << 20)
    node.publishes = True
    clock = [time.time()]
    reapers = [
        StreamReaper(etcd_client, node.store, node.publisher, n, GRACE_S, 1.0, lambda: clock[0])
        for n in ("node-a", "node-b")
    ]
    try:
        partition = await node.store.get(stream, 0)
        await partition.open(1)
        for base in range(0, 9, 3):
            await partition.append(1, [make_batch(base)])
        await node.seal()
        assert [s.first_offset for s in store.committed(stream, 0)] == [0, 3, 6]
        parts = urlsplit(tables.table(stream).metadata.location)
        metadata = parts.path if parts.scheme == "file" else f"{parts.netloc}{parts.path}"
        assert exists(store, store.stream_path(stream))
        assert exists(store, metadata)
        await etcd_client.put(ledgers_key(stream, 0), b'{"ledgers": []}')
        await etcd_client.put(f"/tamto/epochs/{stream}/0".encode(), b"1")
        record = StreamDeletion(stream, 1, int(clock[0] * 1e6), ("node-a", "node-b"))
        await etcd_client.put(deletion_key(stream), record.to_json())
        await node.store.release_stream(stream)  # the bus event's doing

        # During the grace period nothing goes. (The session's etcd is shared: other
        # tests' records may be due too.)
        assert stream not in await reapers[0].reap_due()
        assert node.store.stream_dir(stream).exists()
        assert len(store.committed(stream, 0)) == 3
        assert len(await etcd_keys(etcd_client, stream)) == 2

        clock[0] += GRACE_S
        assert stream in await reapers[0].reap_due()
        assert not node.store.stream_dir(stream).exists()
        assert not exists(store, store.stream_path(stream))
        with pytest.raises(NoSuchTableError):
            tables.catalog.load_table((NAMESPACE, stream))
        assert not exists(store, metadata)
        assert await etcd_keys(etcd_client, stream) == []
        left = await etcd_client.get(deletion_key(stream))
        assert left is not None
        assert StreamDeletion.from_json(left.value).pending == ("node-b",)

        assert stream in await reapers[1].reap_due()  # the other node's part: the record goes
        assert await etcd_client.get(deletion_key(stream)) is None

        # The name used again starts empty at offset 0 on this node.
        again = await node.store.get(stream, 0)
        assert (await again.open(2)).next_offset == 0
    finally:
        await node.store.close()
