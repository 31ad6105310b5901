"""The readable range of a partition is the one storage's manifest holds now (issue 18.2).

Retention moves a partition's start; a subscription created at earliest starts
there, `Start.offset(n)` below it is out of range, and a subscription that
retention overtook skips what was removed, though the router appended (and
cached) those messages itself. Its own cluster: storage seals at once and lets
segments expire within a second (another cluster on the same etcd would share
the storage nodes).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import nats
import pytest
from nats.aio.msg import Msg

import tamto_sdk
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


async def test_subscriptions_start_where_retention_left_the_partition(
    retention_cluster: TestCluster,
) -> None:
    """Retention moved the manifest's start to 6: a new subscription at earliest starts
    there and `Start.offset(2)` is out of range, though the router appended (and
    cached) offsets 0-5 itself. Before the fix both read the removed messages."""
    cluster = retention_cluster
    stream = unique("retained")
    stream_dir = cluster.workdir / "storage" / "streams" / stream
    async with await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        config = tamto_sdk.StreamConfig(retention_ms=1000)
        await client.streams.ensure(stream, partitions=1, config=config)
        await publish(client, stream, 6)

        def start() -> int:
            try:
                return read_manifest(stream_dir).start_offsets.get(0, 0)
            except FileNotFoundError:
                return 0

        await eventually(lambda: start() == 6, 30, "retention moved the start to 6")
        for attempt in range(REPEATS):
            at_earliest = client.consumer(stream, f"early{attempt}", start=Start.earliest())
            async with at_earliest:
                assert len(await at_earliest.receive_batch(10, timeout_s=0.3)) == 0
            with pytest.raises(tamto_sdk.InvalidArgument, match=r"below .* start offset 6"):
                async with client.consumer(stream, f"s{attempt}", start=Start.offset(2)) as c:
                    await c.receive_batch(10, timeout_s=5)
        await publish(client, stream, 2)
        async with client.consumer(stream, "late", start=Start.earliest()) as late:
            assert [m.offset for m in await take(late, 2)] == [6, 7]


async def test_a_lagging_subscription_skips_what_retention_removed(
    retention_cluster: TestCluster, nats_url: str
) -> None:
    """A subscription whose cursor is at 0 reattaches after retention moved the start
    to 6: the router, told by storage's bus event, forgets its cached batches and
    the subscription skips to 6. Before the fix it read 0-5 from the cache."""
    cluster = retention_cluster
    stream = unique("lagging")
    bus = await nats.connect(nats_url)
    events: asyncio.Queue[dict[str, int | str]] = asyncio.Queue()

    async def on_event(msg: Msg) -> None:
        event = json.loads(msg.data)
        if event["stream"] == stream:
            events.put_nowait(event)

    await bus.subscribe("tamto.events.partition.range_shrunk", cb=on_event)
    try:
        async with await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            config = tamto_sdk.StreamConfig(retention_ms=1000)
            await client.streams.ensure(stream, partitions=1, config=config)
            async with client.consumer(stream, "lag", start=Start.earliest()):
                pass  # the cursor now exists, at 0
            await publish(client, stream, 6)
            async with asyncio.timeout(30):
                while (await events.get())["start_offset"] != 6:
                    pass
            async with client.consumer(stream, "lag") as lagging:
                assert len(await lagging.receive_batch(10, timeout_s=0.5)) == 0
                await publish(client, stream, 2)
                assert [m.offset for m in await take(lagging, 2)] == [6, 7]
    finally:
        await bus.close()
