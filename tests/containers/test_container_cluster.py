"""Tamto as containers: each service's image (scripts/build_images.py, on the local
Debian base) runs on a podman network with etcd and NATS, and the SDK on the host
publishes and consumes through the gateway container's published port.

Then the failures docs/cluster.md describes: a router killed -9 for good (the other
router claims its partitions once its lease lapses, and traffic goes on), and the
storage node killed -9 (podman's restart policy brings the container back, with its
data, and every message acknowledged before the crash is still there). Each image's
own health check (the gRPC health service) says when a container is ready.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator

import pytest

import tamto_sdk
from tamto_common.apikeys import new_api_key
from tamto_common.cluster_credential import new_cluster_secret
from tamto_testing.needs import needs
from tamto_testing.processes import wait_for
from tamto_testing.waiting import eventually

from .podman import SERVICE_PORT, ContainerCluster, binary_image, container_cluster, unavailable

#: A cold run builds the Debian base (about 3.5 minutes here) before the images; a
#: warm one (its tarball cached, podman's layers too) takes about 4 minutes in all at
#: load 27 on 2 cores.
pytestmark = [pytest.mark.container, needs(unavailable()), pytest.mark.timeout(1800)]

#: Short leases: a dead router's partitions move within seconds.
LEASE_TTL_S = 3
#: Started in two waves, as `tamto up` starts them: the backends side by side, then the
#: gateway (which so finds every router and storage node registered).
BACKENDS = ("auth", "storage", "router-1", "router-2", "processing")
SERVICES = (*BACKENDS, "gateway")
STREAM = "orders"
PARTITIONS = 4
READY_S = 150.0


@pytest.fixture
def cluster(service_images: dict[str, str]) -> Iterator[tuple[ContainerCluster, str, str]]:
    """The running cluster, the gateway's URL on the host and the API key."""
    api_key = str(new_api_key())
    with container_cluster() as containers:
        etcd = containers.address("etcd")
        containers.run(
            "etcd",
            binary_image("etcd"),
            args=(
                "--name=tamto",
                "--data-dir=/tmp/etcd",
                "--listen-client-urls=http://0.0.0.0:2379",
                f"--advertise-client-urls=http://{etcd}:2379",
                "--listen-peer-urls=http://127.0.0.1:2380",
            ),
        )
        containers.run("nats", binary_image("nats-server"), args=("-a", "0.0.0.0", "-p", "4222"))
        shared = {
            "TAMTO_ETCD_ENDPOINTS": f"{etcd}:2379",
            "TAMTO_NATS_URL": f"nats://{containers.address('nats')}:4222",
            "TAMTO_CLUSTER_SECRET": new_cluster_secret(),
            "TAMTO_LEASE_TTL_S": str(LEASE_TTL_S),
            "TAMTO_AUTH_DEV_API_KEY": api_key,
        }
        try:
            start(containers, BACKENDS, service_images, shared)
            start(containers, ("gateway",), service_images, shared)
            host, port = containers.published("gateway", SERVICE_PORT)
            yield containers, f"tamto://{host}:{port}", api_key
        except BaseException:
            for name in ("etcd", "nats", *SERVICES):
                print(f"--- {name}\n{containers.logs(name)}")
            raise


def start(
    containers: ContainerCluster,
    names: tuple[str, ...],
    images: dict[str, str],
    shared: dict[str, str],
) -> None:
    """Start service containers `names` (`router-2`: a second router) at once, then wait
    until each image's health check passes."""
    for name in names:
        service = name.partition("-")[0]
        env = {
            **shared,
            "TAMTO_INSTANCE_ID": name,
            "TAMTO_ADVERTISE_HOST": containers.address(name),
        }
        options: tuple[str, ...] = ()
        if service == "storage":
            options = ("--restart=on-failure",)
        elif service == "gateway":
            options = (f"--publish=127.0.0.1::{SERVICE_PORT}",)
        containers.run(name, images[service], env=env, options=options)
    for name in names:
        wait_for(functools.partial(containers.healthy, name), READY_S, f"{name}'s health check")


async def publish(client: tamto_sdk.Client, first: int, count: int) -> None:
    async with client.producer(STREAM) as producer:
        for i in range(first, first + count):
            await producer.send_and_wait(f"m{i}".encode(), key=f"k{i}".encode())


async def consume(client: tamto_sdk.Client, subscription: str, count: int) -> set[bytes]:
    """`count` messages of `subscription`, acknowledged; fails on fewer within 60 s."""
    got: set[bytes] = set()
    async with client.consumer(STREAM, subscription) as consumer:

        async def more() -> bool:
            batch = await consumer.receive_batch(max_messages=count, timeout_s=1)
            got.update(m.payload for m in batch)
            consumer.ack(batch)
            return len(got) >= count

        await eventually(more, 60, f"{count} messages of {subscription}")
        await consumer.flush_acks(timeout_s=10)
    return got


def sent(first: int, count: int) -> set[bytes]:
    return {f"m{i}".encode() for i in range(first, first + count)}


async def test_a_cluster_of_containers_serves_the_sdk_and_survives_kills(
    cluster: tuple[ContainerCluster, str, str],
) -> None:
    containers, url, api_key = cluster
    for name in SERVICES:
        assert containers.exec(name, "id", "-u").strip() == "10001", f"{name} runs as root"
    async with tamto_sdk.connect(url, api_key=api_key) as client:
        await client.streams.ensure(STREAM, partitions=PARTITIONS)
        await publish(client, 0, 100)
        assert await consume(client, "shipping", 100) == sent(0, 100)

        # A router dies for good: the other takes its partitions (docs/cluster.md, 1).
        containers.crash("router-1")
        wait_for(lambda: containers.state("router-1")["Status"] == "exited", 30, "router-1 dead")
        await publish(client, 100, 100)
        assert await consume(client, "shipping", 100) == sent(100, 100)
        assert containers.state("router-1")["Status"] == "exited"

        # The storage node crashes: podman restarts its container, its log intact.
        restarts = containers.inspect("storage")["RestartCount"]
        containers.crash("storage")
        wait_for(
            lambda: (
                containers.inspect("storage")["RestartCount"] != restarts
                and containers.healthy("storage")
            ),
            READY_S,
            "storage restarted by podman and healthy",
        )
        await publish(client, 200, 50)
        everything = await consume(client, f"audit-{uuid.uuid4().hex[:6]}", 250)
        assert everything == sent(0, 250)
