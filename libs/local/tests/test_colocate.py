"""The launcher's co-located nodes: which processes run, and what each is told."""

from __future__ import annotations

from pathlib import Path

from tamto_common.config import load_config
from tamto_local.cluster import ServiceEnv, node_processes, service_env
from tamto_local.colocate import colocated, node_env
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
