"""The Storage gRPC API over a real server and channel, errors translated to statuses."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from storage_testkit import (
    DEFAULT_OPTIONS,
    flip_byte,
    frame_position,
    make_batch,
    payloads,
    wal_files,
)

from tamto_common.grpc_errors import TranslateErrorsInterceptor
from tamto_protocol.limits import MAX_CURSOR_RANGES
from tamto_protocol.v1 import messages_pb2, storage_pb2, storage_pb2_grpc
from tamto_storage.grpc_api import StorageServicer, serve
from tamto_storage.model import PartitionId, StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.store import PartitionStore, partition_dir
from tamto_testing.grpc_servers import listen

REF = storage_pb2.PartitionRef(stream="orders", partition=0)
Serve = Callable[[Path], contextlib.AbstractAsyncContextManager[Any]]


def wire(batch: StoredBatch) -> Any:
    return messages_pb2.StoredBatch(
        base_offset=batch.base_offset,
        count=batch.count,
        publish_time_us=batch.publish_time_us,
        arrow_ipc=bytes(batch.arrow_ipc),
    )


def domain(batch: Any) -> StoredBatch:
    return StoredBatch(batch.base_offset, batch.count, batch.publish_time_us, batch.arrow_ipc)


@contextlib.asynccontextmanager
async def serving(data_dir: Path) -> AsyncIterator[Any]:
    """A storage server on a free port over `data_dir`, and a stub connected to it."""
    store = PartitionStore(data_dir, DEFAULT_OPTIONS)
    server = grpc.aio.server(interceptors=[TranslateErrorsInterceptor()])
    serve(StorageServicer(store, 1 << 20), server)
    port = listen(server)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield storage_pb2_grpc.StorageStub(channel)
    finally:
        await server.stop(None)
        await store.close()


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[Any]:
    async with serving(tmp_path / "data") as s:
        yield s


async def expect_status(call: Any, code: grpc.StatusCode, message: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    assert message in (info.value.details() or ""), info.value.details()


async def test_happy_path(stub: Any) -> None:
    opened = await stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=REF, epoch=1))
    assert (opened.next_offset, opened.start_offset) == (0, 0)
    appended = await stub.Append(
        storage_pb2.StorageAppendRequest(
            partition=REF, epoch=1, batches=[wire(make_batch(0)), wire(make_batch(3, 2))]
        )
    )
    assert appended.next_offset == 5
    appended = await stub.Append(
        storage_pb2.StorageAppendRequest(partition=REF, epoch=1, batches=[wire(make_batch(5))])
    )
    assert appended.next_offset == 8

    read = await stub.Read(storage_pb2.ReadRequest(partition=REF, from_offset=4))
    assert [b.base_offset for b in read.batches] == [3, 5]
    assert read.next_offset == 8
    assert payloads(domain(read.batches[0])) == [b"message-3", b"message-4"]
    assert read.batches[1].publish_time_us == make_batch(5).publish_time_us

    read = await stub.Read(storage_pb2.ReadRequest(partition=REF, from_offset=0, max_messages=1))
    assert [b.base_offset for b in read.batches] == [0]
    assert read.next_offset == 3

    missing = await stub.GetCursor(storage_pb2.GetCursorRequest(partition=REF, subscription="s"))
    assert not missing.exists
    await stub.CommitCursor(
        storage_pb2.CommitCursorRequest(
            partition=REF,
            subscription="s",
            epoch=1,
            ack_floor=2,
            acked_above_floor=[messages_pb2.OffsetRange(first=4, last=6)],
        )
    )
    cursor = await stub.GetCursor(storage_pb2.GetCursorRequest(partition=REF, subscription="s"))
    assert cursor.exists
    assert cursor.ack_floor == 2
    assert [(r.first, r.last) for r in cursor.acked_above_floor] == [(4, 6)]


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (None, "partition is required"),
        (storage_pb2.PartitionRef(stream="", partition=0), "stream name must not be empty"),
        (storage_pb2.PartitionRef(stream="a/b", partition=0), "illegal stream name 'a/b'"),
        (storage_pb2.PartitionRef(stream="ok", partition=100_000), "partition must be in 0-99999"),
    ],
)
async def test_bad_partition_refs(stub: Any, ref: Any, message: str) -> None:
    request = storage_pb2.OpenPartitionRequest(epoch=1)
    if ref is not None:
        request.partition.CopyFrom(ref)
    await expect_status(stub.OpenPartition(request), grpc.StatusCode.INVALID_ARGUMENT, message)
    await expect_status(
        stub.Read(storage_pb2.ReadRequest(partition=ref)), grpc.StatusCode.INVALID_ARGUMENT, message
    )


async def test_bad_appends(stub: Any) -> None:
    await stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=REF, epoch=2))
    await stub.Append(
        storage_pb2.StorageAppendRequest(partition=REF, epoch=2, batches=[wire(make_batch(0))])
    )
    await expect_status(
        stub.Append(storage_pb2.StorageAppendRequest(partition=REF, epoch=2)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "an append needs at least one batch",
    )
    await expect_status(
        stub.Append(
            storage_pb2.StorageAppendRequest(partition=REF, epoch=2, batches=[wire(make_batch(7))])
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "base offset 7 does not match the partition's next offset 3",
    )
    await expect_status(
        stub.Append(
            storage_pb2.StorageAppendRequest(partition=REF, epoch=1, batches=[wire(make_batch(3))])
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "stale epoch 1 < current 2",
    )
    await expect_status(
        stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=REF, epoch=1)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "stale epoch 1 < current 2",
    )
    await expect_status(
        stub.CommitCursor(
            storage_pb2.CommitCursorRequest(partition=REF, subscription="s", epoch=1)
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "stale epoch 1 < current 2",
    )
    await expect_status(
        stub.Read(storage_pb2.ReadRequest(partition=REF, from_offset=9)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "offset 9 is beyond the partition's end 3",
    )


async def test_corruption_is_data_loss(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    directory = partition_dir(data_dir, PartitionId("orders", 0))
    partition = await Partition.load(PartitionId("orders", 0), directory, DEFAULT_OPTIONS)
    batches = [make_batch(i * 3) for i in range(3)]
    await partition.open(1)
    for batch in batches:
        await partition.append(1, [batch])
    await partition.close()
    (path,) = wal_files(directory)
    flip_byte(path, frame_position(batches, 1) + 40)

    async with serving(data_dir) as stub:
        read = await stub.Read(storage_pb2.ReadRequest(partition=REF, from_offset=0))
        assert [b.base_offset for b in read.batches] == [0]
        await expect_status(
            stub.Read(storage_pb2.ReadRequest(partition=REF, from_offset=3)),
            grpc.StatusCode.DATA_LOSS,
            f"data lost: {path} holding offsets 3- is damaged: frame checksum mismatch",
        )
        await expect_status(
            stub.Append(
                storage_pb2.StorageAppendRequest(
                    partition=REF, epoch=1, batches=[wire(make_batch(9))]
                )
            ),
            grpc.StatusCode.DATA_LOSS,
            "holding offsets 3- is damaged",
        )
        # The damage does not stop a claim: the offsets below it stay readable.
        opened = await stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=REF, epoch=2))
        assert (opened.start_offset, opened.next_offset) == (0, 9)  # the frames past it end at 9


async def test_a_cursor_over_its_range_limit_is_refused_before_any_work(stub: Any) -> None:
    await stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=REF, epoch=1))
    ranges = [
        messages_pb2.OffsetRange(first=2 * i + 1, last=2 * i + 1)
        for i in range(MAX_CURSOR_RANGES + 1)
    ]
    await expect_status(
        stub.CommitCursor(
            storage_pb2.CommitCursorRequest(
                partition=REF, subscription="s", epoch=1, acked_above_floor=ranges
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"acked_above_floor has {MAX_CURSOR_RANGES + 1} elements; at most {MAX_CURSOR_RANGES}",
    )
    await stub.CommitCursor(
        storage_pb2.CommitCursorRequest(
            partition=REF, subscription="s", epoch=1, acked_above_floor=ranges[:-1]
        )
    )
    cursor = await stub.GetCursor(storage_pb2.GetCursorRequest(partition=REF, subscription="s"))
    assert len(cursor.acked_above_floor) == MAX_CURSOR_RANGES
