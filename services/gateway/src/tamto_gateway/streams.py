"""Stream definitions, kept in etcd under `/tamto/streams/<name>`.

"Ensure" creates a stream if missing; when it exists with another config it
reports each difference and changes it only when asked to overwrite. The
partition count is fixed at creation (keys would move otherwise). Creating,
changing and deleting a stream publish `tamto.events.stream.changed` /
`tamto.events.stream.deleted` on the bus; gateways drop cached definitions on
either. Deleting a persistent stream also records its deletion in etcd
(`tamto_common.deletions`): storage removes its data once the grace period has
passed, and until then the name cannot be created again.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import aetcd
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from tamto_common.bus import EVENTS, STREAM_DELETED, publish_event
from tamto_common.deletions import StreamDeletion, deletion_key, holders
from tamto_common.errors import FailedPrecondition, NotFound
from tamto_common.membership import list_members
from tamto_common.names import check_name
from tamto_common.streams import MAX_PARTITIONS, STREAMS_PREFIX, StreamDef, stream_key

log = structlog.get_logger(__name__)

STREAM_CHANGED = "stream.changed"


@dataclass(frozen=True)
class Ensured:
    """The outcome of `StreamRegistry.ensure`.

    `differences` lists how the request differed from what was stored: kept as
    stored unless the call overwrote them (then `stream` is the new definition).
    """

    stream: StreamDef
    created: bool
    differences: list[str]


class StreamRegistry:
    """Ensure, describe, list and delete stream definitions; caches what it read."""

    def __init__(
        self,
        etcd: aetcd.Client,
        max_partitions: int = MAX_PARTITIONS,
        bus: NatsClient | None = None,
        storage_nodes: Callable[[], int] | None = None,
    ) -> None:
        """`storage_nodes` counts the live storage nodes (for the replication
        factor's default and bound); without it neither is applied."""
        self._etcd = etcd
        self._max_partitions = max_partitions
        self._bus = bus
        self._storage_nodes = storage_nodes
        self._cache: dict[str, StreamDef] = {}

    def validate(self, wanted: StreamDef) -> None:
        """Raise `InvalidArgument` if `wanted` is not a legal definition."""
        nodes = self._storage_nodes() if self._storage_nodes is not None else None
        wanted.validate(self._max_partitions, nodes)

    def _with_defaults(self, wanted: StreamDef) -> StreamDef:
        """`wanted` with R and Q it leaves at 0 chosen for a new stream."""
        nodes = self._storage_nodes() if self._storage_nodes is not None else 1
        return wanted.with_replication_defaults(nodes)

    async def ensure(self, wanted: StreamDef, overwrite: bool) -> Ensured:
        """Create `wanted` if missing; otherwise report, and with `overwrite` apply, differences.

        Raises `InvalidArgument` for an illegal definition and `FailedPrecondition`
        when `overwrite` would change the partition count.
        """
        requested = wanted.normalized()
        wanted = self._with_defaults(requested)
        wanted.validate(self._max_partitions, None)
        key = stream_key(wanted.name)
        deleting = deletion_key(wanted.name)
        if await self._etcd.get(key) is None:
            # Only a new (or, below, a changed) stream's R must fit the live storage nodes:
            # ensuring one that exists must not fail while a node is restarting and out of
            # this gateway's view for a moment.
            self.validate(wanted)
        tx = self._etcd.transactions
        while True:
            created, _ = await self._etcd.transaction(
                compare=[tx.version(key) == 0, tx.version(deleting) == 0],
                success=[tx.put(key, wanted.to_json())],
                failure=[],
            )
            if created:
                self._cache[wanted.name] = wanted
                await self._publish(STREAM_CHANGED, wanted)
                return Ensured(wanted, True, [])
            kv = await self._etcd.get(key)
            if kv is None:
                if await self._etcd.get(deleting) is not None:
                    raise FailedPrecondition(
                        f"stream {wanted.name!r} was deleted and its data is being removed "
                        "(storage's --stream-delete-grace-ms): create it again once that is done"
                    )
                continue  # deleted meanwhile: create it
            stored = StreamDef.from_json(kv.value)
            self._cache[wanted.name] = stored
            wanted = _replication_as_stored(requested, stored)
            diff = stored.differences(wanted)
            if not diff or not overwrite:
                return Ensured(stored, False, diff)
            self.validate(wanted)  # an R named now must fit the live storage nodes
            if stored.partitions != wanted.partitions:
                raise FailedPrecondition(
                    f"stream {wanted.name!r} has {stored.partitions} partitions, requested "
                    f"{wanted.partitions}: the partition count is fixed at creation "
                    "(nothing was changed)"
                )
            replaced, _ = await self._etcd.transaction(
                compare=[tx.mod(key) == kv.mod_revision],
                success=[tx.put(key, wanted.to_json())],
                failure=[],
            )
            if replaced:
                self._cache[wanted.name] = wanted
                await self._publish(STREAM_CHANGED, wanted)
                return Ensured(wanted, False, diff)
            # Changed by someone else meanwhile: compare against the new definition.

    async def describe(self, name: str, fresh: bool = False) -> StreamDef:
        """The definition of `name` (from the cache unless `fresh`); `NotFound` if missing."""
        check_name("stream", name)
        if not fresh and name in self._cache:
            return self._cache[name]
        kv = await self._etcd.get(stream_key(name))
        if kv is None:
            self._cache.pop(name, None)
            raise NotFound(f"stream {name!r} does not exist")
        stream = StreamDef.from_json(kv.value)
        self._cache[name] = stream
        return stream

    async def list(self) -> list[StreamDef]:
        """Every stream definition, sorted by name."""
        result = await self._etcd.get_prefix(STREAMS_PREFIX.encode())
        return sorted((StreamDef.from_json(kv.value) for kv in result), key=lambda s: s.name)

    async def delete(self, name: str) -> bool:
        """Delete the definition of `name`; False if there was none.

        For a persistent stream the same etcd transaction records the deletion
        (`tamto_common.deletions`): after the grace period storage removes the
        stream's segments (local and in the segment store), WAL, cursors, Iceberg
        table, ledgers, owners and epochs; until then the name cannot be created
        again. On the bus event storage seals and closes the stream's open
        partitions at once, and routers hand them back.
        """
        check_name("stream", name)
        key = stream_key(name)
        tx = self._etcd.transactions
        while True:
            kv = await self._etcd.get(key)
            self._cache.pop(name, None)
            if kv is None:
                return False
            stored = StreamDef.from_json(kv.value)
            writes = [tx.delete(key)]
            if stored.kind != "ephemeral":
                registered = [m.instance_id for m in await list_members(self._etcd, "storage")]
                record = StreamDeletion(
                    name,
                    stored.partitions,
                    int(time.time() * 1e6),
                    await holders(self._etcd, name, registered),
                )
                writes.append(tx.put(deletion_key(name), record.to_json()))
            deleted, _ = await self._etcd.transaction(
                compare=[tx.mod(key) == kv.mod_revision], success=writes, failure=[]
            )
            if deleted:
                break  # otherwise changed meanwhile: read it again
        await self._publish(STREAM_DELETED, stored)
        return True

    async def watch_events(self) -> Subscription | None:
        """Drop cached definitions when any gateway changes or deletes a stream.

        Returns the bus subscription (to unsubscribe on shutdown), or None without a bus.
        """
        if self._bus is None:
            return None

        async def forget(msg: Msg) -> None:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self._cache.pop(json.loads(msg.data)["stream"], None)

        return await self._bus.subscribe(f"{EVENTS}.stream.*", cb=forget)

    async def _publish(self, topic: str, stream: StreamDef) -> None:
        if self._bus is None:
            return
        try:
            await publish_event(self._bus, topic, stream=stream.name, partitions=stream.partitions)
        except Exception as exc:  # the etcd change stands; peers reread on a cache miss
            log.warning(
                "stream event not published", topic=topic, stream=stream.name, error=str(exc)
            )


def _replication_as_stored(requested: StreamDef, stored: StreamDef) -> StreamDef:
    """`requested` with the R and Q it leaves to the default taken from `stored`:
    the defaults were chosen at creation, and a request that does not name them
    does not differ from the stored stream in them (nor changes them)."""
    replication = requested.replication_factor or stored.replication_factor
    if requested.ack_quorum:
        quorum = requested.ack_quorum
    elif requested.replication_factor:
        quorum = replication // 2 + 1
    else:
        quorum = stored.ack_quorum
    return replace(requested, replication_factor=replication, ack_quorum=quorum)
