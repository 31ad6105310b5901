"""The S3 segment store unavailable for a while, on a 3-node cluster with R = 3: SeaweedFS
stops mid-run, publishes are still acknowledged and a subscriber still gets them (from
the WAL, which the replicas keep), storage says the store is unreachable (a metric and a
log line); started again on the same data, sealing catches up and the store holds every
acknowledged message exactly once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

import tamto_sdk
from tamto_local.s3 import ACCESS_KEY, SECRET_KEY, S3Spec
from tamto_sdk import StreamConfig
from tamto_spark.location import read_stream_manifest
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.s3 import s3_server
from tamto_testing.waiting import eventually

from .members import gauge, process_metrics
from .test_segment_store import FAST_SEALING, publish, stored

pytestmark = pytest.mark.e2e

PREFIX = "outage"
BATCH = 30


class Seaweed:
    """A SeaweedFS that a test stops and starts again on the same data and ports."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.spec = S3Spec(data_dir=workdir / "seaweedfs")
        self._running: AbstractContextManager[S3Spec] | None = None

    def start(self) -> None:
        self._running = s3_server(self.workdir, self.spec)
        self._running.__enter__()

    def stop(self) -> None:
        if self._running is not None:
            self._running.__exit__(None, None, None)
            self._running = None


@pytest.fixture
def seaweed(tmp_path: Path) -> Iterator[Seaweed]:
    server = Seaweed(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def store_errors(cluster: TestCluster) -> float:
    pages = [await process_metrics(cluster, node) for node in cluster.storages()]
    return sum(gauge(page, "tamto_storage_store_errors_total") for page in pages)


def logged_unreachable(cluster: TestCluster) -> bool:
    logs = (cluster.workdir / "logs" / f"{node}.log" for node in cluster.storages())
    return any("segment store unreachable" in log.read_text() for log in logs)


async def receive(consumer: tamto_sdk.Consumer, count: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < count:
        batch = await consumer.receive_batch(max_messages=count - len(got), timeout_s=30)
        assert batch, f"only {len(got)} of {count} messages arrived"
        got += [m.payload for m in batch]
        consumer.ack(batch)
    return got


async def test_an_s3_outage_loses_and_doubles_nothing(
    tamto_infra: Infra, tmp_path: Path, seaweed: Seaweed
) -> None:
    spec = seaweed.spec
    env = {**FAST_SEALING, **spec.env(), "TAMTO_STORAGE_SEGMENT_STORE": spec.uri(PREFIX)}
    stream = f"outage{uuid.uuid4().hex[:8]}"  # the session's etcd is shared
    # Credentials in the URI: this process has none in its environment.
    location = spec.uri(f"{PREFIX}/streams/{stream}").replace(
        "s3://", f"s3://{ACCESS_KEY}:{SECRET_KEY}@"
    )
    cluster = TestCluster(tmp_path / "cluster", tamto_infra, nodes=3, storage_env=env)
    with cluster.running() as running:
        async with await tamto_sdk.connect(running.url, api_key=running.credential) as client:
            await client.streams.ensure(
                stream, partitions=2, config=StreamConfig(replication_factor=3, ack_quorum=2)
            )
            async with client.consumer(stream, "reader") as consumer:
                acked = await publish(client, stream, 0, BATCH)
                assert sorted(await receive(consumer, BATCH)) == sorted(p for *_, p in acked)
                await eventually(
                    lambda: stored(spec, PREFIX, stream) == sorted(acked),
                    60,
                    "the first messages in the store",
                    interval_s=0.5,
                )
                errors = await store_errors(running)

                seaweed.stop()
                during = await publish(client, stream, BATCH, BATCH)  # acknowledged all the same
                got = await receive(consumer, BATCH)  # from the replicas' WAL
                assert sorted(got) == sorted(p for *_, p in during)
                await eventually(
                    lambda: logged_unreachable(running), 30, "a log line: store unreachable"
                )
                await eventually(
                    lambda: store_errors_grew(running, errors), 30, "the store error metric"
                )

                seaweed.start()
                everything = sorted(acked + during)
                await eventually(
                    lambda: stored_once_back(spec, stream) == everything,
                    90,
                    "every acknowledged message in the store once",
                    interval_s=0.5,
                )
                ends: dict[int, int] = {}
                for p, o, _ in everything:
                    ends[p] = max(ends.get(p, 0), o + 1)
                await eventually(
                    lambda: read_stream_manifest(location).end_offsets() == ends,
                    30,
                    "the store's manifests list them",
                    interval_s=0.5,
                )


def stored_once_back(spec: S3Spec, stream: str) -> list[tuple[int, int, bytes]] | None:
    """What the store holds (`stored`), or None while the restarted SeaweedFS still
    answers reads with errors (INTERNAL_FAILURE for a while after it starts)."""
    try:
        return stored(spec, PREFIX, stream)
    except OSError:
        return None


async def store_errors_grew(cluster: TestCluster, before: float) -> bool:
    return await store_errors(cluster) > before
