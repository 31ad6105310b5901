"""Wiring the storage service into a running Tamto service process."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace

import structlog
from nats.aio.msg import Msg

from tamto_common.audit import AuditLog
from tamto_common.bus import EVENTS, RANGE_SHRUNK, STREAM_DELETED, publish_event
from tamto_common.config import MIB
from tamto_common.deletions import deletion_key
from tamto_common.ledgers import read_ledgers
from tamto_common.membership import list_members
from tamto_common.service import Runtime
from tamto_common.streams import read_stream
from tamto_storage import space
from tamto_storage.config import StorageConfig
from tamto_storage.grpc_api import StorageServicer, serve
from tamto_storage.metrics import UNSEALED_BYTES
from tamto_storage.publisher import Publisher
from tamto_storage.reaper import StreamReaper
from tamto_storage.sealer import Retention
from tamto_storage.segment_store import SegmentStore, is_data_dir
from tamto_storage.store import PartitionStore
from tamto_storage.store_cache import CACHE_DIR, StoreCache
from tamto_storage.wal import WalOptions

log = structlog.get_logger(__name__)


def publisher(config: StorageConfig, runtime: Runtime) -> Publisher | None:
    """The publisher into `--segment-store`, or None when that is the data directory."""
    uri = config.segment_store
    if not uri or is_data_dir(uri, config.data_dir):
        return None
    store = SegmentStore.open(uri)

    async def designated(stream: str, partition: int) -> bool:
        """Whether this node is the first live member of the partition's current ensemble
        (nobody publishes a deleted stream: its objects are about to be removed)."""
        if await runtime.etcd.get(deletion_key(stream)) is not None:
            return False
        current = (await read_ledgers(runtime.etcd, stream, partition)).current
        if current is None:  # not replicated through ledgers: every copy is the only one
            return True
        live = {m.instance_id for m in await list_members(runtime.etcd, "storage")}
        first_live = next((node for node in current.ensemble if node in live), None)
        return first_live == config.member_id

    tables = None
    if config.iceberg_catalog:
        # Imported here: pyiceberg brings pandas and SQLAlchemy, seconds of CPU at every
        # start of a node that has no catalog.
        from tamto_storage.iceberg import IcebergTables

        tables = IcebergTables(config.iceberg_catalog, store)
    cache = None
    if config.store_cache_mb:
        cache = StoreCache(store, config.data_dir / CACHE_DIR, config.store_cache_mb * MIB)
    log.info("sealing into the segment store", store=uri, iceberg=config.iceberg_catalog)
    grace_s = config.retention_grace_ms / 1000
    return Publisher(store, designated, tables, cache, retention_grace_s=grace_s)


async def setup(config: StorageConfig, runtime: Runtime) -> None:
    """Build the partition store, serve it, start its sealer; close both on shutdown."""
    await serve_node(config, runtime)


async def serve_node(config: StorageConfig, runtime: Runtime) -> StorageServicer:
    """`setup`, and the servicer it serves: a process that runs a router beside this
    node calls it in-process too."""
    space.set_node(config.member_id)

    async def stream_options(stream: str, defaults: WalOptions) -> WalOptions:
        """A stream's durability policy from its definition in etcd, if it has one."""
        definition = await read_stream(runtime.etcd, stream)
        if definition is None or definition.durability != "interval":
            return defaults
        interval_s = (definition.fsync_interval_ms or config.fsync_interval_ms) / 1000
        return replace(defaults, group_commit=False, fsync_interval_s=interval_s)

    async def retention(stream: str) -> Retention:
        """A stream's retention; keep everything when it is not defined."""
        definition = await read_stream(runtime.etcd, stream)
        if definition is None:
            return Retention()
        return Retention(
            definition.retention_ms,
            definition.retention_bytes,
            interest=definition.retention_policy == "interest",
        )

    into_store = publisher(config, runtime)
    store = PartitionStore(
        config.data_dir,
        config.wal_options(),
        stream_options,
        seal_options=config.seal_options(),
        retention_for=retention,
        decoded_groups=config.decoded_groups(),
        publisher=into_store,
    )
    runtime.resources.push_async_callback(store.close)
    reaper = StreamReaper(
        runtime.etcd,
        store,
        into_store,
        config.member_id,
        config.stream_delete_grace_ms / 1000,
        config.seal_check_ms / 1000,
    )

    async def announce(stream: str, partition: int, start: int) -> None:
        await publish_event(
            runtime.bus, RANGE_SHRUNK, stream=stream, partition=partition, start_offset=start
        )

    store.on_range_shrunk = announce

    async def stream_deleted(msg: Msg) -> None:
        """A gateway deleted a stream's definition: seal and close its partitions here."""
        try:
            stream = json.loads(msg.data)["stream"]
            await store.release_stream(stream)
        except Exception:  # a malformed event, or the disk: the WAL still holds it all
            log.exception("deleted stream's partitions not released", event=msg.data[:200])

    deletions = await runtime.bus.subscribe(f"{EVENTS}.{STREAM_DELETED}", cb=stream_deleted)

    async def unsubscribe() -> None:
        with contextlib.suppress(Exception):  # the bus may be closed already
            await deletions.unsubscribe()

    runtime.resources.push_async_callback(unsubscribe)
    UNSEALED_BYTES.set_function(store.unsealed_bytes)
    store.start_sealer()
    reaper.start()
    runtime.resources.push_async_callback(reaper.stop)
    # Repairs from a healthy replica are audited where `tamto storage repair` writes.
    audit = AuditLog("storage", config.data_dir / "audit.jsonl", runtime.bus)
    runtime.resources.push_async_callback(audit.close)
    servicer = StorageServicer(store, config.read_max_bytes, audit)
    serve(servicer, runtime.server)
    return servicer
