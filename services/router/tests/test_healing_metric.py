"""The replicas an owner heals, and why, on its metrics page (`tamto status` reads them):
a lagging replica that is registered is healing, one that is not is down; and the
background catch-up that heals them outlives a round that fails."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY, generate_latest

from tamto_router import replica_catch_up
from tamto_router.healing_metric import HEALING, HEALING_METRIC
from tamto_router.model import LogBounds
from tamto_router.partition_log import PartitionLog
from tamto_router.storage_client import StorageClient
from tamto_testing.waiting import eventually

ENSEMBLE = ("storage-a", "storage-b", "storage-c")


def unused_client() -> StorageClient:
    return StorageClient.__new__(StorageClient)  # never called here


def lagging_c(
    a: StorageClient, b: StorageClient, client_for: Callable[[str], StorageClient | None]
) -> PartitionLog:
    """Partition orders/3 with storage-a and storage-b taking appends, storage-c lagging."""
    return PartitionLog(
        "orders",
        3,
        1,
        a,
        LogBounds(0, 0),
        replicas={"storage-a": a, "storage-b": b},
        quorum=2,
        ensemble=ENSEMBLE,
        client_for=client_for,
    )


async def test_a_registered_lagging_replica_is_healing_and_says_why() -> None:
    a, b, c = unused_client(), unused_client(), unused_client()
    registered: dict[str, StorageClient] = {"storage-a": a, "storage-b": b}
    log = lagging_c(a, b, registered.get)
    try:
        assert log.lagging() == ["storage-c"]
        assert log.healing() == {}, "not registered: down, not healing"
        registered["storage-c"] = c
        assert log.healing() == {"storage-c": "catching up"}
        log.catch_up_errors["storage-c"] = "offsets below 5 are sealed"
        reason = "catching up (last try: offsets below 5 are sealed)"
        assert log.healing() == {"storage-c": reason}

        HEALING.source = lambda: {("orders", 3): log.healing()}
        page = generate_latest(REGISTRY).decode()
        series = (
            f'{HEALING_METRIC}{{partition="3",reason="{reason}",replica="storage-c",'
            'stream="orders"} 1.0'
        )
        assert series in page
        HEALING.source = dict
        assert f"{HEALING_METRIC}{{" not in generate_latest(REGISTRY).decode()
    finally:
        HEALING.source = dict
        await log.close()


async def test_a_repair_round_that_fails_does_not_end_the_repairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unexpected error in one round of the background catch-up is logged and the
    next round runs: a repair loop that died silently left a replica behind for good."""
    monkeypatch.setattr(replica_catch_up, "REPAIR_INTERVAL_S", 0.01)
    asked: list[str] = []

    def client_for(node: str) -> StorageClient | None:
        asked.append(node)
        if len(asked) == 1:
            raise RuntimeError("a bug in the first round")
        return None  # down

    log = lagging_c(unused_client(), unused_client(), client_for)
    try:
        await eventually(lambda: len(asked) >= 3, 5.0, "the rounds after the failed one")
        assert set(asked) == {"storage-c"}
    finally:
        await log.close()
