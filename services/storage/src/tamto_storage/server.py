"""Wiring the storage service into a running Tamto service process."""

from __future__ import annotations

from tamto_common.service import Runtime
from tamto_protocol.v1 import storage_pb2_grpc
from tamto_storage.config import StorageConfig
from tamto_storage.grpc_api import StorageServicer
from tamto_storage.store import PartitionStore


async def setup(config: StorageConfig, runtime: Runtime) -> None:
    """Build the partition store, serve it, and close it (flushing) on shutdown."""
    store = PartitionStore(config.data_dir, config.wal_options())
    runtime.resources.push_async_callback(store.close)
    storage_pb2_grpc.add_StorageServicer_to_server(
        StorageServicer(store, config.read_max_bytes), runtime.server
    )
