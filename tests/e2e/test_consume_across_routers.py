"""A consumer whose partitions are owned by two routers reads everything.

The gateway fans a consume session out to every router owning some of its
partitions. Credit given to a router cannot be taken back, so a grant split
between the routers strands the idle router's share: once it holds half the
consumer's window, the busy router delivers less than the half the SDK waits
for before granting again, and the session stops for good. That is what a
read-back after a partition moved to another router ran into (fresh-clone CI:
"only 2430 messages"). Here one router's partition holds a few messages and
the other's many (stored one by one), with a small window, so a split grant
stalls within a few rounds; the test fails on the first 15 s without a delivery.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import tamto_sdk
from tamto_common.config import parse_endpoints
from tamto_common.membership import connect_etcd
from tamto_common.placement import Placement
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import running_infra
from tests.e2e.test_load_balancing import PARTITIONS, keys_for
from tests.e2e.test_planned_moves import owners

pytestmark = pytest.mark.e2e

FEW, MANY = 20, 600
CREDITS = 40  # refill at 20: a split grant strands 10 more on the idle router each round


@pytest.mark.timeout(300)
async def test_a_consumer_reads_a_busy_and_an_idle_router_to_the_end(tmp_path: Path) -> None:
    # An etcd and NATS of its own: routers of other modules' clusters would join the ring.
    with running_infra(tmp_path / "infra") as infra:
        cluster = TestCluster(tmp_path / "cluster", infra, nodes=2)
        routers = [cluster.instance_id(name) for name in ("router", "router-2")]
        while True:  # a stream whose partitions 0 and 1 the ring gives different routers
            stream = f"two-{uuid.uuid4().hex[:8]}"
            if Placement().owner(routers, stream, 0) != Placement().owner(routers, stream, 1):
                break
        keys = keys_for({0, 1})
        try:
            cluster.start_together(["auth", "storage", "router", "router-2"])
            cluster.start("gateway")
            async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
                await client.streams.ensure(stream, partitions=PARTITIONS)
                sent: set[bytes] = set()
                async with client.producer(stream) as producer:
                    # One at a time: stored batches of one message, so that an exclusive
                    # consumer's allowance of one stored batch beyond its credit is small.
                    for partition, count in ((0, FEW), (1, MANY)):
                        for i in range(count):
                            payload = f"{partition}-{i}".encode()
                            await producer.send_and_wait(payload, key=keys[partition])
                            sent.add(payload)
                etcd = await connect_etcd(parse_endpoints(infra.etcd_endpoint))
                try:
                    placed = await owners(etcd, stream)
                finally:
                    await etcd.close()
                assert placed[0] != placed[1], f"both partitions on one router: {placed}"

                got: set[bytes] = set()
                async with client.consumer(stream, "reader", credits=CREDITS) as consumer:
                    while got != sent:
                        batch = await consumer.receive_batch(timeout_s=15)
                        assert len(batch) > 0, (
                            f"no delivery for 15 s with {len(sent - got)} of {len(sent)} "
                            f"messages unread (credit stranded on the idle router?)"
                        )
                        got.update(m.payload for m in batch)
                        consumer.ack(batch)
                assert got == sent
        finally:
            cluster.stop_all()
