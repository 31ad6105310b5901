"""Fixtures for storage tests: batches with known payloads, partitions on real files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from storage_testkit import DEFAULT_OPTIONS, OpenPartition

from tamto_storage.model import PartitionId
from tamto_storage.partition import Partition
from tamto_storage.store import partition_dir
from tamto_storage.wal import WalOptions


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    """The directory of the test partition `orders/0` under tmp_path."""
    return partition_dir(tmp_path / "data", PartitionId("orders", 0))


@pytest.fixture
async def load(pdir: Path) -> AsyncIterator[OpenPartition]:
    """Load the test partition (again): `await load()` or `await load(options)`.

    Every partition loaded is closed at teardown unless the test closed it.
    """
    opened: list[Partition] = []

    async def _load(options: WalOptions = DEFAULT_OPTIONS) -> Partition:
        partition = await Partition.load(PartitionId("orders", 0), pdir, options)
        opened.append(partition)
        return partition

    yield _load
    for partition in opened:
        await partition.close()
