"""FenceLedger: a new owner's fence refuses the old owner's appends and answers the
end that is on disk (docs/cluster.md section 3)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from storage_testkit import make_batch
from test_storage_grpc import REF, expect_status, serving, wire

from tamto_protocol.v1 import storage_pb2


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[Any]:
    async with serving(tmp_path / "data") as s:
        yield s


def append(epoch: int, base: int, count: int) -> Any:
    return storage_pb2.StorageAppendRequest(
        partition=REF, epoch=epoch, batches=[wire(make_batch(base, count))]
    )


async def test_fence_refuses_the_old_owner_and_answers_the_last_offset(stub: Any) -> None:
    await stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=REF, epoch=3))
    await stub.Append(append(3, 0, 5))
    fenced = await stub.FenceLedger(storage_pb2.FenceLedgerRequest(partition=REF, epoch=4))
    assert fenced.last_offset == 4
    await expect_status(
        stub.Append(append(3, 5, 1)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "stale epoch 3 < current 4",
    )
    # Fencing again with the same epoch changes nothing and answers the same end.
    again = await stub.FenceLedger(storage_pb2.FenceLedgerRequest(partition=REF, epoch=4))
    assert again.last_offset == 4
    # The new owner appends with its epoch after the fenced end.
    done = await stub.Append(append(4, 5, 2))
    assert done.next_offset == 7


async def test_a_fence_from_an_older_epoch_is_refused(stub: Any) -> None:
    await stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=REF, epoch=5))
    await expect_status(
        stub.FenceLedger(storage_pb2.FenceLedgerRequest(partition=REF, epoch=4)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "stale epoch 4 < current 5",
    )


async def test_an_empty_partition_is_fenced_at_minus_one(stub: Any) -> None:
    fenced = await stub.FenceLedger(storage_pb2.FenceLedgerRequest(partition=REF, epoch=1))
    assert fenced.last_offset == -1


async def test_the_fence_answers_after_appends_accepted_before_it_are_on_disk(
    stub: Any,
) -> None:
    """Appends in flight when the fence arrives are counted in its answer only once
    fsynced: the answer never names an offset that is not on disk yet."""
    await stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=REF, epoch=1))
    appends = [asyncio.ensure_future(stub.Append(append(1, i * 3, 3))) for i in range(20)]
    fence = asyncio.ensure_future(
        stub.FenceLedger(storage_pb2.FenceLedgerRequest(partition=REF, epoch=2))
    )
    outcomes = await asyncio.gather(*appends, return_exceptions=True)
    fenced = await fence
    accepted = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(accepted) + len(refused) == 20
    assert all(r.code() == grpc.StatusCode.FAILED_PRECONDITION for r in refused)
    # Every acknowledged append is inside the fenced range, and the range ends at
    # what was acknowledged (appends in order: the accepted ones are a prefix).
    assert fenced.last_offset == 3 * len(accepted) - 1
    read = await stub.Read(storage_pb2.ReadRequest(partition=REF, from_offset=0))
    assert read.next_offset == fenced.last_offset + 1
