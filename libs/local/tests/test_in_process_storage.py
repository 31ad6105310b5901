"""The router's storage client over `InProcessStorage` answers as it does over gRPC:
the same offsets, batches and cursors, the same errors, for one storage servicer
reached both ways (a real gRPC server on a free port, and in-process)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tamto_common.errors import FailedPrecondition, InvalidArgument, Unavailable
from tamto_common.grpc_errors import TranslateErrorsInterceptor
from tamto_local.in_process_storage import InProcessStorage
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_router.acks import AckSet
from tamto_router.model import Batch
from tamto_router.storage_client import StorageClient
from tamto_storage.grpc_api import StorageServicer, serve
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions
from tamto_testing.grpc_servers import listen


def batch(base_offset: int, count: int) -> Batch:
    arrow = encode_batch(
        BatchColumns(
            payloads=[f"m{o}".encode() for o in range(base_offset, base_offset + count)],
            keys=[None] * count,
            headers=[None] * count,
            ids=[None] * count,
            event_times_us=[None] * count,
            producer="test",
        )
    )
    return Batch(base_offset, count, 1_000_000 + base_offset, arrow)


@contextlib.asynccontextmanager
async def both_ways(data_dir: Path) -> AsyncIterator[tuple[StorageClient, StorageClient]]:
    """A client of one storage servicer over gRPC, and one in-process."""
    store = PartitionStore(data_dir, WalOptions())
    servicer = StorageServicer(store, 1 << 20)
    server = grpc.aio.server(interceptors=[TranslateErrorsInterceptor()])
    serve(servicer, server)
    port = listen(server)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    over_grpc = StorageClient(channel, timeout_s=10)
    # The in-process client's channel is never used: a dead address proves it.
    unused = grpc.aio.insecure_channel("127.0.0.1:9")
    in_process = StorageClient(unused, timeout_s=10, api=InProcessStorage(servicer))
    try:
        yield over_grpc, in_process
    finally:
        for client in (over_grpc, in_process):
            await client.close()
        await channel.close()
        await unused.close()
        await server.stop(None)
        await store.close()


async def test_the_same_answers_in_process_as_over_grpc(tmp_path: Path) -> None:
    async with both_ways(tmp_path / "data") as (over_grpc, in_process):
        assert (await in_process.open_partition("s", 0, 1)).next_offset == 0
        assert await in_process.append("s", 0, 1, [batch(0, 3)]) == 3
        assert await over_grpc.append("s", 0, 1, [batch(3, 2)]) == 5
        assert await in_process.append("s", 0, 1, [batch(5, 1)]) == 6
        for client in (over_grpc, in_process):
            batches, next_offset = await client.read("s", 0, 0, 100, from_cache=False)
            assert [(b.base_offset, b.count) for b in batches] == [(0, 3), (3, 2), (5, 1)]
            assert bytes(batches[0].arrow_ipc) == bytes(batch(0, 3).arrow_ipc)
            assert next_offset == 6
        await in_process.commit_cursor("s", 0, "sub", 1, AckSet(2, [(4, 4)], 0, 0))
        for client in (over_grpc, in_process):
            cursor = await client.get_cursor("s", 0, "sub")
            assert cursor is not None
            assert (cursor.floor, cursor.ranges) == (2, [(4, 4)])
            assert await client.list_cursors("s", 0) == ["sub"]
            assert (await client.disk_usage("s", 0)).bounds.next_offset == 6


async def test_failures_are_the_same_errors_in_process_as_over_grpc(tmp_path: Path) -> None:
    async with both_ways(tmp_path / "data") as (over_grpc, in_process):
        await over_grpc.open_partition("s", 0, 2)
        for client in (over_grpc, in_process):
            with pytest.raises(FailedPrecondition) as stale:
                await client.append("s", 0, 1, [batch(0, 1)])
            assert str(stale.value).startswith("storage append s/0: ")
            with pytest.raises(InvalidArgument, match="must not be negative"):
                await client.open_partition("s", 0, 2, start_at=-1)
        messages = set()
        for client in (over_grpc, in_process):
            with pytest.raises(FailedPrecondition) as stale:
                await client.append("s", 0, 1, [batch(0, 1)])
            messages.add(str(stale.value))
        assert len(messages) == 1, messages


async def test_a_node_not_built_yet_is_unavailable_and_a_slow_one_times_out(
    tmp_path: Path,
) -> None:
    local = InProcessStorage()
    async with grpc.aio.insecure_channel("127.0.0.1:9") as unused:
        client = StorageClient(unused, timeout_s=0.2, api=local)
        with pytest.raises(Unavailable, match="not serving yet"):
            await client.open_partition("s", 0, 1)

        class Stuck(StorageServicer):
            async def OffsetForTime(self, request: object, context: object) -> object:  # type: ignore[override]
                await asyncio.Event().wait()  # never answers
                raise AssertionError

        store = PartitionStore(tmp_path / "data", WalOptions())
        local.servicer = Stuck(store, 1 << 20)
        try:
            with pytest.raises(Unavailable, match=r"no answer in 0\.2 s"):
                await client.offset_for_time("s", 0, 0)
        finally:
            await store.close()
