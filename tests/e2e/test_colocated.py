"""`tamto up --colocate`: each node's router and storage node as one process, the
router's calls to that storage node made in-process, and a kill -9 of the process
losing no acknowledged message."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

import tamto_sdk
from tamto_common.config import parse_endpoints
from tamto_common.dev_credential import load_dev_credential
from tamto_common.membership import connect_etcd, list_members
from tamto_sdk import ClientOptions
from tamto_testing.processes import wait_for

from .test_launcher import Launcher, launched

pytestmark = pytest.mark.e2e

#: The storage RPCs a router makes when it opens and writes a partition.
ROUTER_TO_STORAGE = ("/tamto.v1.Storage/OpenPartition", "/tamto.v1.Storage/AppendStream")


async def members(up: Launcher) -> dict[str, tuple[int, str]]:
    """service -> (pid, metrics address) of each registered member."""
    etcd = await connect_etcd(parse_endpoints(f"127.0.0.1:{up.etcd}"))
    try:
        return {m.service: (m.pid, m.metrics_address) for m in await list_members(etcd)}
    finally:
        await etcd.close()


def storage_calls(metrics_address: str) -> dict[str, float]:
    """Calls the storage node served over gRPC, by method (its `tamto_rpc_server_seconds`)."""
    page = httpx.get(f"http://{metrics_address}/metrics", timeout=10).text
    calls: dict[str, float] = {}
    for line in page.splitlines():
        if line.startswith("tamto_rpc_server_seconds_count{"):
            method = line.split('method="', 1)[1].split('"', 1)[0]
            calls[method] = calls.get(method, 0.0) + float(line.rsplit(" ", 1)[1])
    return calls


async def produce_and_consume(
    up: Launcher, stream: str, total: int, kill_after: int | None = None
) -> tuple[set[bytes], set[bytes]]:
    """Publish `total` messages one `send_and_wait` at a time (straight to the router),
    killing the co-located node with SIGKILL after `kill_after`; consume the stream.
    (acknowledged, received)."""
    api_key = load_dev_credential(up.data_dir)
    assert api_key is not None
    url = f"tamto://127.0.0.1:{up.gateway}"
    acked: set[bytes] = set()
    async with tamto_sdk.connect(url, api_key=api_key, options=ClientOptions(direct=True)) as c:
        await c.streams.ensure(stream, partitions=2)
        async with c.producer(stream) as producer:
            for i in range(total):
                if i == kill_after:
                    pid = (await members(up))["router"][0]
                    os.kill(pid, signal.SIGKILL)
                await producer.send_and_wait(f"m{i}".encode())  # retried until acknowledged
                acked.add(f"m{i}".encode())
        received: set[bytes] = set()
        async with c.consumer(stream, "check") as consumer:
            deadline = time.monotonic() + 90
            while not acked <= received and time.monotonic() < deadline:
                batch = await consumer.receive_batch(max_messages=100, timeout_s=2)
                received.update(m.payload for m in batch)
                consumer.ack(batch)
    return acked, received


@pytest.mark.timeout(600)
def test_colocated_node_serves_both_and_calls_its_storage_in_process(tmp_path: Path) -> None:
    with launched(tmp_path, "--quiet", "--colocate") as up:
        registered = asyncio.run(members(up))
        assert registered["storage"][0] == registered["router"][0], "one process for both"
        assert (up.data_dir / "storage").is_dir()

        acked, received = asyncio.run(produce_and_consume(up, "together", 30))
        assert acked == received == {f"m{i}".encode() for i in range(30)}
        # The router opened and wrote the partitions without a gRPC call to its node.
        served = storage_calls(registered["storage"][1])
        assert not [m for m in ROUTER_TO_STORAGE if served.get(m)], served

        pid = registered["router"][0]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "node is back" in up.output(), 120, "the node to restart")
        restarted = asyncio.run(members(up))
        assert restarted["storage"][0] == restarted["router"][0] != pid
        assert up.stop() == 0
    assert "node stopped (code 0" in up.output()


@pytest.mark.timeout(600)
def test_kill9_of_the_colocated_node_loses_no_acknowledged_message(tmp_path: Path) -> None:
    with launched(tmp_path, "--quiet", "--colocate") as up:
        acked, received = asyncio.run(produce_and_consume(up, "kept", 60, kill_after=25))
        assert "node exited with code -9" in up.output()
        assert len(acked) == 60
        missing = acked - received
        assert not missing, f"{len(missing)} acknowledged messages lost: {sorted(missing)[:5]}"
