"""Acceptance of the S3 segment store, on a real S3 server (SeaweedFS): a 3-node cluster with
R = 3 publishes, sealing commits one segment per range to the store, the storage node that
publishes is killed, the next replica takes over where the store ends, and a reader of the
store, the `tamto` data source's reader planning from the store's manifests, and PyIceberg
reading the stream's Iceberg table of the same files, get every acknowledged message
exactly once. tests/spark/test_spark_s3_store.py reads the same with Spark itself."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest
import sqlalchemy.exc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError

import tamto_sdk
from tamto_local.s3 import ACCESS_KEY, SECRET_KEY, S3Spec
from tamto_protocol.segment import parse_segment_name
from tamto_sdk import StreamConfig
from tamto_spark.segments import read_table
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e

FAST_SEALING = {"TAMTO_STORAGE_SEAL_AGE_MS": "200", "TAMTO_STORAGE_SEAL_CHECK_MS": "100"}
PREFIX = "acceptance"


@pytest.fixture
def s3_cluster(tamto_infra: Infra, tmp_path: Path, s3_server: S3Spec) -> Iterator[TestCluster]:
    env = {
        **FAST_SEALING,
        **s3_server.env(),
        "TAMTO_STORAGE_SEGMENT_STORE": s3_server.uri(f"{PREFIX}-{tmp_path.name}"),
        "TAMTO_STORAGE_ICEBERG_CATALOG": catalog_uri(tmp_path),
    }
    cluster = TestCluster(tmp_path / "cluster", tamto_infra, nodes=3, storage_env=env)
    with cluster.running() as running:
        yield running


def catalog_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'iceberg.db'}"


def open_catalog(uri: str, **properties: str) -> SqlCatalog | None:
    """The storage nodes' Iceberg catalog, as a reader opens it; None while they are
    creating its tables (opening creates any missing, and SQLite refuses the loser of
    that race: "table iceberg_tables already exists")."""
    try:
        return SqlCatalog("tamto", uri=uri, **properties)
    except sqlalchemy.exc.OperationalError:
        return None


def in_table(s3: S3Spec, tmp_path: Path, stream: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, payload) of every row PyIceberg reads from the stream's table."""
    catalog = open_catalog(
        catalog_uri(tmp_path),
        **{"s3.endpoint": f"http://{s3.endpoint}", "s3.region": "us-east-1"},
        **{"s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY},
    )
    if catalog is None:
        return []
    try:
        table = catalog.load_table(("tamto", stream)).scan().to_arrow()
    except NoSuchTableError:
        return []
    columns = (table.column(c).to_pylist() for c in ("partition", "offset", "payload"))
    return sorted(zip(*columns, strict=True))


def location(s3: S3Spec, prefix: str, stream: str) -> str:
    """The stream's location in the store as the `tamto` data source takes it, with the
    credentials in the URI (so a Spark executor needs none in its environment)."""
    uri = s3.uri(f"{prefix}/streams/{stream}")
    return uri.replace("s3://", f"s3://{ACCESS_KEY}:{SECRET_KEY}@")


def tamto_rows(where: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, payload) of every row the `tamto` data source's planning and
    executors' reads give at `where` (without a JVM)."""
    table = read_table(where)
    columns = (table.column(c).to_pylist() for c in ("partition", "offset", "payload"))
    return sorted(zip(*columns, strict=True))


def stored(s3: S3Spec, prefix: str, stream: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, payload) of every row in the store's segments of `stream`."""
    filesystem = s3.filesystem()
    path = f"tamto/{prefix}/streams/{stream}"
    if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
        return []
    table = ds.dataset(path, filesystem=filesystem, partitioning="hive").to_table()
    columns = (table.column(c).to_pylist() for c in ("partition", "offset", "payload"))
    return sorted(zip(*columns, strict=True))


def publisher_of(cluster: TestCluster, stream: str, after: int = -1) -> str | None:
    """The storage node that logged publishing a segment of `stream` ending past `after`."""
    for node in cluster.storages():
        for line in (cluster.workdir / "logs" / f"{node}.log").read_text().splitlines():
            if '"segment published"' not in line:
                continue
            record = json.loads(line)
            last = parse_segment_name(record["segment"])
            if record["partition"] == f"{stream}/0" and last is not None and last[1] > after:
                return node
    return None


async def publish(
    client: tamto_sdk.Client, stream: str, first: int, count: int
) -> list[tuple[int, int, bytes]]:
    acked = []
    async with client.producer(stream) as producer:
        futures = [await producer.send(f"m-{i}".encode()) for i in range(first, first + count)]
        for i, future in zip(range(first, first + count), futures, strict=True):
            result = await future
            acked.append((result.partition, result.offset, f"m-{i}".encode()))
    return acked


async def test_every_acked_message_is_in_the_s3_store_once_after_its_publisher_dies(
    s3_cluster: TestCluster, s3_server: S3Spec, tmp_path: Path
) -> None:
    prefix = f"{PREFIX}-{tmp_path.name}"
    stream, acked = await publish_and_kill_the_publisher(s3_cluster, s3_server, tmp_path)
    # The `tamto` data source's reader, from the store's manifests: every acked one once.
    await eventually(
        lambda: tamto_rows(location(s3_server, prefix, stream)) == sorted(acked),
        30,
        "every acked message read once by the tamto source",
        interval_s=0.5,
    )


async def publish_and_kill_the_publisher(
    s3_cluster: TestCluster, s3_server: S3Spec, tmp_path: Path
) -> tuple[str, list[tuple[int, int, bytes]]]:
    """Publish, wait for sealing, kill the storage node that publishes to the store,
    publish more; returns the stream and every acked (partition, offset, payload), once
    the store and the Iceberg table hold exactly those."""
    prefix = f"{PREFIX}-{tmp_path.name}"
    stream = f"store{uuid.uuid4().hex[:8]}"  # the session's etcd is shared: a name of its own
    async with await tamto_sdk.connect(s3_cluster.url, api_key=s3_cluster.credential) as client:
        await client.streams.ensure(
            stream, partitions=1, config=StreamConfig(replication_factor=3, ack_quorum=2)
        )
        acked = await publish(client, stream, 0, 60)
        await eventually(
            lambda: stored(s3_server, prefix, stream) == sorted(acked),
            60,
            "the first 60 messages in the store",
            interval_s=0.5,
        )

        # The publisher logs its segment once the store has it: the log line can come
        # a moment after the objects are readable.
        await eventually(
            lambda: publisher_of(s3_cluster, stream) is not None, 30, "the publisher's log"
        )
        victim = publisher_of(s3_cluster, stream)
        assert victim is not None
        s3_cluster.kill9(victim)
        acked += await publish(client, stream, 60, 60)
        # Its registration expires (lease TTL), and the next replica of the ensemble
        # publishes from where the store ends, whatever points the nodes sealed at.
        await eventually(
            lambda: stored(s3_server, prefix, stream) == sorted(acked),
            90,
            "every acked message in the store, once",
            interval_s=0.5,
        )
        await eventually(
            lambda: publisher_of(s3_cluster, stream, after=59) is not None,
            30,
            "the successor's log",
        )
        successor = publisher_of(s3_cluster, stream, after=59)
        assert successor not in (None, victim)
        # The same files, as an Iceberg table: every acked message once too.
        await eventually(
            lambda: in_table(s3_server, tmp_path, stream) == sorted(acked),
            30,
            "every acked message in the Iceberg table, once",
            interval_s=0.5,
        )
    return stream, acked
