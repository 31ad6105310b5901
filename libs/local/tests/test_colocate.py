"""The launcher's co-located nodes: which processes run, and what each is told."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from test_launcher_failures import config as launch_config

from tamto_common.config import load_config
from tamto_local.cluster import LaunchError, LocalCluster
from tamto_local.colocate import colocated, node_env
from tamto_local.layout import ServiceEnv, node_processes, service_env
from tamto_router.config import RouterConfig
from tamto_storage.config import StorageConfig


def test_each_nodes_storage_and_router_become_one_process() -> None:
    assert colocated(node_processes(1, processing=True)) == [
        "auth",
        "node",
        "gateway",
        "processing",
    ]
    assert colocated(node_processes(2)) == ["auth", "node", "node-2", "gateway", "gateway-2"]


def test_a_node_configures_each_service_as_it_would_be_apart(tmp_path: Path) -> None:
    shared = ServiceEnv("127.0.0.1:2379", "nats://127.0.0.1:4222", tmp_path, "key")
    ports = {"storage-2": 7001, "router-2": 7002}

    def env_of(process: str) -> dict[str, str]:
        return service_env(
            process.partition("-")[0], shared, ports[process], process=process, nodes=2
        )

    env = node_env("node-2", env_of)
    assert "TAMTO_DATA_DIR" not in env
    storage = load_config(StorageConfig, "storage", [], env)
    router = load_config(RouterConfig, "router", [], env)
    assert (storage.port, storage.member_id) == (7001, "storage-2")
    assert (router.port, router.member_id) == (7002, "router-2")
    assert storage.data_dir == tmp_path / "node-2" / "storage"


@pytest.mark.timeout(400)
async def test_a_node_whose_storage_setting_is_refused_fails_the_launch(tmp_path: Path) -> None:
    config = dataclasses.replace(
        launch_config(tmp_path, {"TAMTO_STORAGE_SEGMENT_READ_CACHE_MB": "-1"}), colocate=True
    )
    # Generous: the node imports both services, slowly on a loaded machine; its exit
    # is noticed as soon as it happens.
    cluster = LocalCluster(config, lambda *_: None, lambda _: None, ready_timeout_s=240)
    try:
        with pytest.raises(LaunchError, match="node exited with code 2"):
            await asyncio.wait_for(cluster.start(), 270)
    finally:
        await cluster.stop()
    assert "node" in cluster.processes
    assert not any(name.startswith(("storage", "router")) for name in cluster.processes)
