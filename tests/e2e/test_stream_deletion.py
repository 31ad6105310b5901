"""Deleting a stream on a 3-node cluster with R = 3 and a shared directory segment store:
after the grace period nothing of it is left (no object in the store, no file on any
node, no key in etcd, no Iceberg table), a reader of the deleted stream gets NOT_FOUND,
the name cannot be created again during the grace period, and the stream created again
afterwards starts empty at offset 0 (docs/segments.md, "Deleting a stream")."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import aetcd
import pyarrow.dataset as ds
import pytest
from pyiceberg.exceptions import NoSuchTableError

import tamto_sdk
from tamto_common.deletions import deletion_key, stream_prefixes
from tamto_sdk import StreamConfig
from tamto_sdk.consumer import Consumer
from tamto_sdk.errors import FailedPrecondition, NotFound
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

from .test_segment_store import open_catalog

pytestmark = pytest.mark.e2e

GRACE_MS = 4000
SETTINGS = {
    "TAMTO_STORAGE_SEAL_AGE_MS": "200",
    "TAMTO_STORAGE_SEAL_CHECK_MS": "100",
    "TAMTO_STORAGE_STREAM_DELETE_GRACE_MS": str(GRACE_MS),
}


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def cluster(tamto_infra: Infra, tmp_path: Path, store_dir: Path) -> Iterator[TestCluster]:
    env = {
        **SETTINGS,
        "TAMTO_STORAGE_SEGMENT_STORE": f"file://{store_dir}",
        "TAMTO_STORAGE_ICEBERG_CATALOG": f"sqlite:///{tmp_path / 'iceberg.db'}",
    }
    with TestCluster(tmp_path / "cluster", tamto_infra, nodes=3, storage_env=env).running() as c:
        yield c


def stored(store_dir: Path, stream: str) -> list[tuple[int, bytes]]:
    """(offset, payload) of every row in the store's segments of `stream`."""
    path = store_dir / "streams" / stream
    if not path.exists():
        return []
    table = ds.dataset(path, partitioning="hive").to_table()
    offsets, payloads = table.column("offset").to_pylist(), table.column("payload").to_pylist()
    return sorted(zip(offsets, payloads, strict=True))


def has_table(tmp_path: Path, stream: str) -> bool:
    catalog = open_catalog(f"sqlite:///{tmp_path / 'iceberg.db'}")
    if catalog is None:
        return False
    try:
        catalog.load_table(("tamto", stream))
    except NoSuchTableError:
        return False
    return True


def leftovers(cluster: TestCluster, store_dir: Path, tmp_path: Path, stream: str) -> list[str]:
    """Every file or directory of `stream` still on disk, in the store or as a table."""
    found = []
    for node in cluster.storages():
        found += [str(p) for p in (cluster.data_dir(node) / "streams" / stream).glob("**/*")]
        found += [str(p) for p in (cluster.data_dir(node) / "_store_cache" / stream).glob("**/*")]
    found += [str(p) for p in (store_dir / "streams" / stream).glob("**/*")]
    found += [str(p) for p in (store_dir / "_iceberg" / "tamto" / stream).glob("**/*")]
    if has_table(tmp_path, stream):
        found.append(f"iceberg table tamto.{stream}")
    return found


async def etcd_keys(etcd: aetcd.Client, stream: str) -> list[bytes]:
    keys = [kv.key for p in stream_prefixes(stream) for kv in await etcd.get_prefix(p)]
    if await etcd.get(deletion_key(stream)) is not None:
        keys.append(deletion_key(stream))
    return keys


async def publish(client: tamto_sdk.Client, stream: str, payloads: list[bytes]) -> list[int]:
    async with client.producer(stream) as producer:
        futures = [await producer.send(p) for p in payloads]
        return [(await f).offset for f in futures]


async def receive(client: tamto_sdk.Client, stream: str, sub: str, n: int) -> list[bytes]:
    got: list[bytes] = []
    async with client.consumer(stream, sub) as consumer:
        while len(got) < n:
            batch = await consumer.receive_batch(max_messages=n - len(got), timeout_s=10)
            assert batch, f"only {len(got)} of {n} messages arrived"
            got += [m.payload for m in batch]
            consumer.ack(batch)
    return got


async def drain_until_it_fails(consumer: Consumer, within_s: float) -> None:
    """Receive (and drop) what `consumer` gets until it raises; AssertionError when it
    has not within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        await consumer.receive_batch(max_messages=100, timeout_s=1)
    raise AssertionError(f"the consumer still received after {within_s} s")


async def test_a_deleted_stream_leaves_nothing_and_its_name_starts_again_at_offset_0(
    cluster: TestCluster, store_dir: Path, tmp_path: Path, etcd_client: aetcd.Client
) -> None:
    stream = f"gone{uuid.uuid4().hex[:8]}"  # the session's etcd is shared: a name of its own
    old = [f"old-{i}".encode() for i in range(40)]
    config = StreamConfig(replication_factor=3, ack_quorum=2)
    async with await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(stream, partitions=1, config=config)
        assert await publish(client, stream, old) == list(range(40))
        assert await receive(client, stream, "s", 10) == old[:10]  # a cursor on every replica
        await eventually(
            lambda: stored(store_dir, stream) == list(enumerate(old)),
            60,
            "every message in the store",
            interval_s=0.3,
        )
        await eventually(lambda: has_table(tmp_path, stream), 30, "the Iceberg table")
        assert list((store_dir / "_iceberg" / "tamto" / stream).glob("**/*.json")), "its metadata"
        assert await etcd_keys(etcd_client, stream), "ledgers, owners and epochs in etcd"

        async with client.consumer(stream, "attached") as attached:
            assert len(await attached.receive_batch(max_messages=1, timeout_s=10)) == 1
            assert await client.streams.delete(stream) is True
            # A reader of the deleted stream gets NOT_FOUND: one attached (once its
            # session ends and the SDK opens it again) and a new one.
            with pytest.raises(NotFound):
                await drain_until_it_fails(attached, 60)
        with pytest.raises(NotFound):
            await receive(client, stream, "s", 1)
        # During the grace period the data stays, and the name cannot be taken again.
        assert stored(store_dir, stream) == list(enumerate(old))
        with pytest.raises(FailedPrecondition, match="being removed"):
            await client.streams.ensure(stream, partitions=1, config=config)

        async def removed() -> bool:
            return await etcd_client.get(deletion_key(stream)) is None

        await eventually(removed, GRACE_MS / 1000 + 60, "the deletion to finish", interval_s=0.3)
        assert leftovers(cluster, store_dir, tmp_path, stream) == []
        assert await etcd_keys(etcd_client, stream) == []

        # Created again: empty, at offset 0, no old message and no old cursor.
        await client.streams.ensure(stream, partitions=1, config=config)
        assert await publish(client, stream, [b"new-0"]) == [0]
        assert await receive(client, stream, "s", 1) == [b"new-0"]
        async with client.consumer(stream, "s") as consumer:
            rest = await consumer.receive_batch(max_messages=10, timeout_s=1)
            assert [m.payload for m in rest] == []
