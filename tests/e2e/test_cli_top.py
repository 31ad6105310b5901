"""`tamto top --once --json` on a running Tamto with traffic flowing: throughput per
stream, the subscription's backlog, publish latency and every member serving."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import tamto_sdk
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra

pytestmark = pytest.mark.e2e

ROUTER_ENV = {"TAMTO_ROUTER_SUBSCRIPTION_METRICS_S": "0.2"}


async def top_json(cluster: TestCluster) -> Any:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tamto_cli",
        "top",
        "--once",
        "--json",
        "--interval",
        "2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TAMTO_ETCD_ENDPOINTS": cluster.infra.etcd_endpoint},
    )
    out, errors = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, errors.decode()
    return json.loads(out)


async def test_top_shows_throughput_backlog_latency_and_nodes(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    with TestCluster(tmp_path / "cluster", tamto_infra).running({"router": ROUTER_ENV}) as cluster:
        async with await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            await client.streams.ensure("topped", partitions=1)
            stop = asyncio.Event()

            async def publish() -> None:
                async with client.producer("topped") as producer:
                    while not stop.is_set():
                        await producer.send_and_wait(b"x" * 100)

            async with client.consumer("topped", "lagging") as consumer:
                await consumer.receive_batch(max_messages=1, timeout_s=1)  # attached, acks nothing
                publishing = asyncio.create_task(publish())
                try:
                    await asyncio.sleep(1)  # a backlog, sampled by the router
                    view = await top_json(cluster)
                finally:
                    stop.set()
                    await publishing

    streams = {s["stream"]: s for s in view["streams"]}
    assert streams["topped"]["messages_in_per_s"] > 0
    assert streams["topped"]["bytes_in_per_s"] > 0
    subscriptions = {(s["stream"], s["subscription"]): s for s in view["subscriptions"]}
    lagging = subscriptions[("topped", "lagging")]
    assert lagging["backlog_messages"] > 0
    assert lagging["consumers"] == 1
    latency = view["latency_s"]["publish_to_ack"]
    assert latency["p99"] is not None
    assert latency["p99"] > 0
    own = [
        n
        for n in view["nodes"]
        if n["instance"]
        in {cluster.instance_id(s) for s in ("gateway", "router", "storage", "auth")}
    ]
    assert {n["service"] for n in own} == {"gateway", "router", "storage", "auth"}
    assert all(n["health"] == "SERVING" and n["scraped"] for n in own)
