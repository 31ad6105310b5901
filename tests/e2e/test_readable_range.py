"""The readable range of a partition is the one storage's manifest holds now.

Retention (`retention_ms`, `retention_bytes` and interest retention alike) moves
a partition's start; a subscription created at earliest starts there,
`Start.offset(n)` below it is out of range, and a subscription that retention
overtook skips what was removed, though the router appended (and cached) those
messages itself. Interest retention also removes acked messages from inside the
range (it carries the rest forward): a new subscription never reads them
either. Its own cluster: storage seals at once and lets segments expire within
a second (another cluster on the same etcd would share the storage nodes).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg

import tamto_sdk
import tamto_sdk.stream_config
from tamto_protocol.segment import read_manifest
from tamto_sdk import Start
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually, long_tests_enabled
from tests.e2e.test_bad_input import publish
from tests.e2e.test_subscriptions import take, unique

pytestmark = pytest.mark.e2e

#: Subscriptions created below the start: CI's short run, or the acceptance size.
REPEATS = 50 if long_tests_enabled() else 10

#: Storage seals at once and lets segments expire quickly.
RETENTION_ENV = {
    "TAMTO_STORAGE_SEAL_AGE_MS": "100",
    "TAMTO_STORAGE_SEAL_CHECK_MS": "100",
    "TAMTO_STORAGE_RETENTION_GRACE_MS": "60000",  # the files stay: reads must not use them
}


@pytest.fixture(scope="module")
def retention_cluster(
    tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestCluster]:
    directory = tmp_path_factory.mktemp("retention") / "cluster"
    with TestCluster(directory, tamto_infra).running({"storage": RETENTION_ENV}) as cluster:
        yield cluster


def stored_start(stream_dir: Path) -> int:
    """Partition 0's start as storage's newest manifest holds it (0 before one exists)."""
    try:
        return read_manifest(stream_dir).start_offsets.get(0, 0)
    except FileNotFoundError:
        return 0


def sealed_end(stream_dir: Path) -> int:
    """Where partition 0's sealed segments end (0 before one exists)."""
    try:
        return read_manifest(stream_dir).end_offsets().get(0, 0)
    except FileNotFoundError:
        return 0


async def new_subscriptions_start_at(
    client: tamto_sdk.Client, stream: str, start: int, stored: list[int], below: int = 0
) -> None:
    """REPEATS new subscriptions at earliest read exactly `stored` (what the partition
    holds from its start on); as many at `Start.offset(below)` are refused, naming `start`."""
    for attempt in range(REPEATS):
        async with client.consumer(stream, f"early{attempt}", start=Start.earliest()) as early:
            got = [m.offset for m in await take(early, len(stored))] if stored else []
            assert len(await early.receive_batch(10, timeout_s=0.3)) == 0
            assert got == stored
        with pytest.raises(
            tamto_sdk.errors.InvalidArgument, match=rf"below .* start offset {start}\b"
        ):
            async with client.consumer(stream, f"s{attempt}", start=Start.offset(below)) as c:
                await c.receive_batch(10, timeout_s=5)


async def test_subscriptions_start_where_retention_left_the_partition(
    retention_cluster: TestCluster,
) -> None:
    """Retention moved the manifest's start to 6: a new subscription at earliest starts
    there and `Start.offset(2)` is out of range, though the router appended (and
    cached) offsets 0-5 itself. Before the fix both read the removed messages."""
    cluster = retention_cluster
    stream = unique("retained")
    stream_dir = cluster.workdir / "storage" / "streams" / stream
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        config = tamto_sdk.StreamConfig(retention_ms=1000)
        await client.streams.ensure(stream, partitions=1, config=config)
        await publish(client, stream, 6)

        await eventually(
            lambda: stored_start(stream_dir) == 6, 30, "retention moved the start to 6"
        )
        await new_subscriptions_start_at(client, stream, 6, [], below=2)
        await publish(client, stream, 2)
        async with client.consumer(stream, "late", start=Start.earliest()) as late:
            assert [m.offset for m in await take(late, 2)] == [6, 7]


#: Over `retention_bytes` on its own: any segment holding one of these payloads.
BIG_PAYLOAD_BYTES = 40_000
#: Between a segment of two tiny messages (a few KiB of Parquet) and one big payload.
RETENTION_BYTES = 30_000


async def test_retention_bytes_moves_the_readable_range(retention_cluster: TestCluster) -> None:
    """`retention_bytes` removed the segments of offsets 0-5 (each over the limit on its
    own) and kept 6-7: new subscriptions at earliest read 6-7 only and `Start.offset(0)`
    is refused naming 6, though the router appended (and cached) 0-5 itself."""
    cluster = retention_cluster
    stream = unique("sized")
    stream_dir = cluster.workdir / "storage" / "streams" / stream
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        config = tamto_sdk.StreamConfig(retention_bytes=RETENTION_BYTES)
        await client.streams.ensure(stream, partitions=1, config=config)
        async with client.producer(stream) as producer:
            for _ in range(6):  # incompressible: zstd cannot bring a segment under the limit
                await producer.send(os.urandom(BIG_PAYLOAD_BYTES))
            await producer.flush()
        await eventually(
            lambda: stored_start(stream_dir) == 6, 30, "retention_bytes moved the start to 6"
        )
        await publish(client, stream, 2)
        await eventually(lambda: sealed_end(stream_dir) == 8, 30, "offsets 6-7 sealed")
        assert stored_start(stream_dir) == 6, "a small segment fits under the limit"
        await new_subscriptions_start_at(client, stream, 6, [6, 7])


@asynccontextmanager
async def range_events(nats_url: str, stream: str) -> AsyncIterator[asyncio.Queue[int]]:
    """The start offsets of `stream`'s range_shrunk events on the bus, as they come."""
    bus = await nats.connect(nats_url)
    events: asyncio.Queue[int] = asyncio.Queue()

    async def on_event(msg: Msg) -> None:
        event = json.loads(msg.data)
        if event["stream"] == stream:
            events.put_nowait(int(event["start_offset"]))

    await bus.subscribe("tamto.events.partition.range_shrunk", cb=on_event)
    try:
        yield events
    finally:
        await bus.close()


async def publish_at_once(client: tamto_sdk.Client, stream: str, n: int) -> None:
    """Publish `n` messages as one stored batch: one segment, whenever it is sealed."""
    async with client.producer(stream) as producer:
        await (await producer.send_batch([b"m%d" % i for i in range(n)]))


async def ack_everything(client: tamto_sdk.Client, stream: str, n: int) -> None:
    """The stream's one subscription, "everyone", reads and acks offsets 0..n-1 and leaves."""
    async with client.consumer(stream, "everyone") as everyone:
        received = await take(everyone, n)
        assert [m.offset for m in received] == list(range(n))
        for message in received:
            everyone.ack(message)
        await everyone.flush_acks(timeout_s=20)


async def test_interest_retention_moves_the_readable_range(
    retention_cluster: TestCluster,
) -> None:
    """The only subscription acked offsets 0-5, sealed before 6-7 came: interest retention
    dropped their segments and moved the start to 6. New subscriptions at earliest read
    6-7 only and `Start.offset(0)` is refused naming 6.

    Offsets 6-7 are what lets the start move: a partition's newest sealed message is
    kept while nothing newer exists (docs/segments.md), so with 0-5 alone the segment
    is only rewritten to hold offset 5 (the next test) and the start stays at 0."""
    cluster = retention_cluster
    stream = unique("interest")
    stream_dir = cluster.workdir / "storage" / "streams" / stream
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        config = tamto_sdk.StreamConfig(
            retention_policy=tamto_sdk.stream_config.RetentionPolicy.INTEREST
        )
        await client.streams.ensure(stream, partitions=1, config=config)
        async with client.consumer(stream, "everyone", start=Start.earliest()):
            pass  # its cursor now exists, at 0: it is interested in everything
        await publish_at_once(client, stream, 6)
        await eventually(lambda: sealed_end(stream_dir) == 6, 30, "offsets 0-5 sealed")
        await ack_everything(client, stream, 6)
        await publish(client, stream, 2)
        await eventually(
            lambda: stored_start(stream_dir) == 6, 30, "interest retention moved the start to 6"
        )
        await new_subscriptions_start_at(client, stream, 6, [6, 7])


async def test_interest_retention_removes_acked_messages_inside_the_range(
    retention_cluster: TestCluster, nats_url: str
) -> None:
    """The only subscription acked offsets 0-5 and nothing newer exists: storage keeps
    offset 5 alone (the newest message stays) and the start stays 0. New subscriptions
    at earliest and at `Start.offset(0)` read offset 5 only, though the router appended
    (and cached) 0-4 itself: the bus event made it forget them."""
    cluster = retention_cluster
    stream = unique("carried")
    stream_dir = cluster.workdir / "storage" / "streams" / stream

    def rows_stored() -> int:
        return sum(s.rows for s in read_manifest(stream_dir).segments if s.partition == 0)

    async with (
        await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client,
        range_events(nats_url, stream) as events,
    ):
        config = tamto_sdk.StreamConfig(
            retention_policy=tamto_sdk.stream_config.RetentionPolicy.INTEREST
        )
        await client.streams.ensure(stream, partitions=1, config=config)
        async with client.consumer(stream, "everyone", start=Start.earliest()):
            pass  # its cursor now exists, at 0
        await publish_at_once(client, stream, 6)
        await eventually(lambda: sealed_end(stream_dir) == 6, 30, "offsets 0-5 sealed")
        await ack_everything(client, stream, 6)
        await eventually(lambda: rows_stored() == 1, 30, "0-4 removed, offset 5 carried forward")
        async with asyncio.timeout(30):  # the rewrite's event, which the router gets too
            assert await events.get() == 0
        assert stored_start(stream_dir) == 0

        # The router gets the event on its own bus connection, maybe a moment after this
        # test did (a new subscription then still reads 0-4 from its cache): once one
        # reads 5 first, the router forgot them, and every later one must read 5 alone.
        async def router_forgot() -> bool:
            async with client.consumer(stream, unique("probe"), start=Start.earliest()) as probe:
                return [m.offset for m in await take(probe, 1)] == [5]

        await eventually(router_forgot, 30, "the router to forget the removed 0-4")
        for attempt in range(REPEATS):
            for name, start in (("early", Start.earliest()), ("zero", Start.offset(0))):
                async with client.consumer(stream, f"{name}{attempt}", start=start) as new:
                    assert [m.offset for m in await take(new, 1)] == [5]
                    assert len(await new.receive_batch(10, timeout_s=0.3)) == 0


async def test_a_lagging_subscription_skips_what_retention_removed(
    retention_cluster: TestCluster, nats_url: str
) -> None:
    """A subscription whose cursor is at 0 reattaches after retention moved the start
    to 6: the router, told by storage's bus event, forgets its cached batches and
    the subscription skips to 6. Before the fix it read 0-5 from the cache."""
    cluster = retention_cluster
    stream = unique("lagging")
    async with (
        await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client,
        range_events(nats_url, stream) as events,
    ):
        config = tamto_sdk.StreamConfig(retention_ms=1000)
        await client.streams.ensure(stream, partitions=1, config=config)
        async with client.consumer(stream, "lag", start=Start.earliest()):
            pass  # the cursor now exists, at 0
        await publish(client, stream, 6)
        async with asyncio.timeout(30):
            while await events.get() != 6:
                pass
        async with client.consumer(stream, "lag") as lagging:
            assert len(await lagging.receive_batch(10, timeout_s=0.5)) == 0
            await publish(client, stream, 2)
            assert [m.offset for m in await take(lagging, 2)] == [6, 7]
