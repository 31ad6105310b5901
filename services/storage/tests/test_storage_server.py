"""`server.setup`: the servicer is registered, a deleted stream's partitions are sealed
on the bus event, and shutdown closes (flushes) the store."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import grpc
from storage_testkit import check_batch, make_batch

from tamto_common.bus import STREAM_DELETED, connect_bus, publish_event
from tamto_common.config import load_config, parse_endpoints
from tamto_common.grpc_errors import TranslateErrorsInterceptor
from tamto_common.membership import connect_etcd
from tamto_common.service import Runtime
from tamto_protocol.v1 import messages_pb2, storage_pb2, storage_pb2_grpc
from tamto_storage.config import StorageConfig
from tamto_storage.model import PartitionId, StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.server import setup
from tamto_storage.store import partition_dir
from tamto_testing.grpc_servers import listen
from tamto_testing.waiting import eventually


def vars_of(batch: StoredBatch) -> dict[str, Any]:
    return {f: getattr(batch, f) for f in ("base_offset", "count", "publish_time_us", "arrow_ipc")}


async def test_setup_serves_storage_and_closes_on_shutdown(
    tmp_path: Path, etcd_endpoint: str, nats_url: str
) -> None:
    config = load_config(StorageConfig, "storage", ["--data-dir", str(tmp_path / "data")], {})
    server = grpc.aio.server(interceptors=[TranslateErrorsInterceptor()])
    port = listen(server)
    ref = storage_pb2.PartitionRef(stream="orders", partition=2)
    etcd = await connect_etcd(parse_endpoints(etcd_endpoint))
    async with contextlib.AsyncExitStack() as resources:
        resources.push_async_callback(etcd.close)
        bus = await connect_bus(nats_url, "storage-server-test")
        resources.push_async_callback(bus.close)
        await setup(config, Runtime("storage", server, etcd, bus, resources))
        await server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = storage_pb2_grpc.StorageStub(channel)
            opened = await stub.OpenPartition(
                storage_pb2.OpenPartitionRequest(partition=ref, epoch=7)
            )
            assert opened.next_offset == 0
            appended = await stub.Append(
                storage_pb2.StorageAppendRequest(
                    partition=ref,
                    epoch=7,
                    batches=[messages_pb2.StoredBatch(**vars_of(make_batch(0)))],
                )
            )
            assert appended.next_offset == 3
            gone = storage_pb2.PartitionRef(stream="gone", partition=0)
            await stub.OpenPartition(storage_pb2.OpenPartitionRequest(partition=gone, epoch=1))
            await stub.Append(
                storage_pb2.StorageAppendRequest(
                    partition=gone,
                    epoch=1,
                    batches=[messages_pb2.StoredBatch(**vars_of(make_batch(0)))],
                )
            )
            segments = tmp_path / "data" / "streams" / "gone" / "partition=0"
            await publish_event(bus, STREAM_DELETED, stream="gone", partitions=1)
            await eventually(
                lambda: any(segments.glob("*.parquet")), 30, "the deleted stream sealed at once"
            )
        await server.stop(None)
    # The exit stack closed the store: the partition reopens with its epoch.
    directory = partition_dir(tmp_path / "data", PartitionId("orders", 2))
    partition = await Partition.load(PartitionId("orders", 2), directory, config.wal_options())
    try:
        assert partition.epoch == 7
        (batch,) = (await partition.read(0, 0, 1 << 20)).batches
        check_batch(batch)
    finally:
        await partition.close()
