"""`tamto up --netns`: each node's storage node and router in a network namespace of
their own (`tamto_local.netlab`), registered at its address; etcd, NATS, auth and
the gateways on the lab's bridge; publishing works through a gateway; stopping the
launcher deletes the namespaces. Needs root and `ip`/`iptables`/`ss`."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

import tamto_sdk
from tamto_common.membership import connect_etcd, list_members
from tamto_local.netlab import unavailable
from tamto_testing.needs import needs

from .test_launcher import Launcher

pytestmark = [pytest.mark.e2e, needs(unavailable())]


@pytest.mark.timeout(600)
def test_up_netns_runs_each_node_in_a_namespace_and_removes_them(tmp_path: Path) -> None:
    up = Launcher(tmp_path / "data", tmp_path / "up.log")
    up.start("--quiet", "--nodes", "2", "--netns", "--json", ready_s=300)
    try:
        ready = up.ready()
        bridge = ready["gateway"].removeprefix("tamto://").rsplit(":", 1)[0]
        assert bridge.startswith("10.232."), ready
        found = re.search(r"network namespaces \(.*\): (.*)", up.output())
        assert found is not None, up.output()[-2000:]
        namespaces = re.findall(r"(tamto-\w+-\d) \(([\d.]+)\)", found.group(1))
        assert len(namespaces) == 2, found.group(0)
        hosts = asyncio.run(registered_hosts(bridge, up.etcd))
        for i, (_, address) in enumerate(namespaces, start=1):
            assert hosts[f"storage-{i}"] == hosts[f"router-{i}"] == address, hosts
        assert hosts["gateway-1"] == hosts["auth-1"] == bridge, hosts
        assert asyncio.run(publish_and_read(ready["gateway"], ready["api_key"])) == 20
    finally:
        assert up.stop() == 0
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns, _ in namespaces if ns in listing], listing


async def registered_hosts(bridge: str, etcd_port: int) -> dict[str, str]:
    """The host each instance registered its address with."""
    etcd = await connect_etcd([(bridge, etcd_port)])
    try:
        return {m.instance_id: m.address.rsplit(":", 1)[0] for m in await list_members(etcd)}
    finally:
        await etcd.close()


async def publish_and_read(url: str, api_key: str) -> int:
    """Publish 20 messages on a replicated stream and count what a subscription reads."""
    async with tamto_sdk.connect(url, api_key=api_key) as client:
        await client.streams.ensure("netns", partitions=2)
        async with client.producer("netns") as producer:
            for i in range(20):
                await (await producer.send(f"m{i}".encode()))
        read = 0
        async with client.consumer("netns", "check", credits=100) as consumer:
            for _ in range(200):
                batch = await consumer.receive_batch(max_messages=100, timeout_s=0.5)
                read += len(batch)
                consumer.ack(batch)
                if read >= 20:
                    break
        return read
