"""The launcher notices at once that a service exited while it waited for it to serve, on
its first start and on a restart, instead of waiting out the ready deadline (60 s)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tamto_local.cluster import ClusterConfig, LaunchError, LocalCluster
from tamto_local.ports import free_port
from tamto_testing.waiting import eventually

#: A setting the router refuses at start (it exits with code 2 before serving).
BROKEN_ROUTER = {"TAMTO_ROUTER_READ_BATCH_MESSAGES": "0"}
BROKEN_STORAGE = {"TAMTO_STORAGE_SEGMENT_READ_CACHE_MB": "-1"}
#: Far more than a failed start takes to be noticed on a loaded machine; far less than
#: the ready deadline the launcher waited out before.
NOTICED_S = 30.0


def config(tmp_path: Path, extra_env: dict[str, str]) -> ClusterConfig:
    etcd = free_port()
    peer = free_port()
    while peer == etcd:
        peer = free_port()
    return ClusterConfig(
        data_dir=tmp_path / "data",
        gateway_port=free_port(),
        etcd_port=etcd,
        etcd_peer_port=peer,
        nats_port=free_port(),
        extra_env=extra_env,
    )


async def test_a_service_that_exits_on_its_first_start_fails_the_launch_at_once(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(config(tmp_path, BROKEN_ROUTER), lambda *_: None, lambda _: None)
    started = time.monotonic()
    try:
        with pytest.raises(LaunchError, match="router exited with code 2"):
            await asyncio.wait_for(cluster.start(), NOTICED_S)
    finally:
        await cluster.stop()
    assert time.monotonic() - started < NOTICED_S


async def test_a_failed_restart_is_reported_at_once(tmp_path: Path) -> None:
    notes: list[str] = []
    cluster = LocalCluster(config(tmp_path, {}), lambda *_: None, notes.append)
    try:
        await cluster.start()
        # The next start of storage refuses its settings (the environment is read anew).
        cluster.config.extra_env.update(BROKEN_STORAGE)
        await cluster.kill("storage")
        await eventually(
            lambda: any("storage failed to restart: storage exited" in n for n in notes),
            NOTICED_S,
            "the failed restart reported",
        )
    finally:
        await cluster.stop()
