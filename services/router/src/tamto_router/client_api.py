"""A client's publish straight to the router that owns the partition (the direct path).

Through the gateway a publish costs two Python gRPC hops before storage; a
client that looked the owner up (`Gateway.Lookup`) publishes here instead, one
hop (docs/cluster.md section 5). The router then does what the gateway does for
that call, with the same code: the token is verified and the `publish`
permission checked by `tamto_common.guard.Guard` (denials audited), and the
batch, the stream's kind and the partition by `tamto_common.publishing`
(`validate_batch` with the same size limit), with the gateway's statuses and
messages.

A router serves a client's publish only for a partition it owns on the ring of
live routers (the one the gateways route it to). Otherwise it answers
FAILED_PRECONDITION (`NotOwner`) with the owner's client address in trailing
metadata, empty when the owner serves no clients or no router is known: the
client looks the partition up again and resends with the same ids, which the
owner's dedup window makes safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final, Protocol

import aetcd

from tamto_common.errors import NotFound, NotOwner
from tamto_common.guard import Guard
from tamto_common.membership import Member, MemberDirectory
from tamto_common.names import check_name
from tamto_common.policy import Permission
from tamto_common.publishing import check_publish
from tamto_common.ring import HashRing, partition_key
from tamto_common.streams import StreamDef, read_stream
from tamto_common.tokens import Metadata
from tamto_router.metrics import PUBLISH_ACK_SECONDS
from tamto_router.model import ProducerOrder
from tamto_router.partition_log import Appended
from tamto_router.partitions import Partitions

#: How long a stream definition read from etcd is used before it is read again.
STREAM_CACHE_S: Final = 1.0


class OwnerRule(Protocol):
    """How owners are decided beyond the plain ring (`tamto_common.placement.Placement`:
    moved partitions, drained routers), so this router agrees with the gateways."""

    def eligible(self, routers: Iterable[str]) -> set[str]: ...

    def owner(
        self, routers: Collection[str], stream: str, partition: int, ring: HashRing | None = None
    ) -> str: ...


class RouterRing:
    """The live routers as this router sees them: who owns a partition, decided as the
    gateways decide it (the ring, or `rule()` when given)."""

    def __init__(
        self,
        directory: MemberDirectory,
        instance: str,
        rule: Callable[[], OwnerRule] | None = None,
    ) -> None:
        self._directory = directory
        self.instance = instance
        self._rule = rule
        self._seen: tuple[object, object] = (None, None)
        self._ring = HashRing([])
        self._members: dict[str, Member] = {}

    def owner(self, stream: str, partition: int) -> Member | None:
        """The router owning the partition, or None when none is registered."""
        routers: Sequence[Member] = self._directory.members("router")
        rule = self._rule() if self._rule is not None else None
        if (routers, rule) != self._seen:  # both are replaced, not changed, on a change
            self._members = {m.instance_id: m for m in routers}
            eligible = rule.eligible(self._members) if rule is not None else self._members
            self._ring, self._seen = HashRing(eligible), (routers, rule)
        if not self._ring:
            return None
        if rule is not None:
            return self._members[rule.owner(self._members.keys(), stream, partition, self._ring)]
        return self._members[self._ring.owner(partition_key(stream, partition))]


class StreamDefs:
    """Stream definitions read from etcd, each used for `STREAM_CACHE_S`."""

    def __init__(self, etcd: aetcd.Client) -> None:
        self._etcd = etcd
        self._cache: dict[str, tuple[float, StreamDef]] = {}

    async def get(self, name: str) -> StreamDef:
        """The definition of `name`; `NotFound` if there is none."""
        now = time.monotonic()
        known = self._cache.get(name)
        if known is not None and now - known[0] < STREAM_CACHE_S:
            return known[1]
        definition = await read_stream(self._etcd, name)
        if definition is None:
            self._cache.pop(name, None)
            raise NotFound(f"stream {name!r} does not exist")
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[name] = (now, definition)
        return definition


class ClientPublish:
    """Authorizes, checks and appends a client's batch to a partition this router owns."""

    def __init__(
        self,
        guard: Guard,
        partitions: Partitions,
        ring: RouterRing,
        streams: StreamDefs,
        max_message_bytes: int,
    ) -> None:
        self._guard = guard
        self._partitions = partitions
        self._ring = ring
        self._streams = streams
        self._max_message_bytes = max_message_bytes

    async def publish(
        self,
        metadata: Metadata | None,
        source: str,
        stream: str,
        partition: int,
        arrow_ipc: bytes,
        count: int,
        order: ProducerOrder | None = None,
    ) -> Appended:
        """Append for a client whose call carried `metadata`, from `source` (its peer);
        the time to the ack is observed as the gateway's is (`PUBLISH_ACK_SECONDS`)."""
        started = time.perf_counter()
        check_name("stream", stream)
        principal = await self._guard.principal(metadata, source, "Publish")
        await self._guard.require(principal, Permission.PUBLISH, stream, source, "Publish")
        owner = self._ring.owner(stream, partition)
        if owner is None or owner.instance_id != self._ring.instance:
            raise NotOwner(
                f"router {self._ring.instance} does not own partition {stream}/{partition}: "
                + (f"router {owner.instance_id} does" if owner else "no router is registered"),
                owner.client_address if owner is not None else "",
            )
        definition = await self._streams.get(stream)
        check_publish(definition, partition, arrow_ipc, count, self._max_message_bytes)
        log = await self._partitions.get(stream, partition)
        appended = await log.append(arrow_ipc, count, order)
        PUBLISH_ACK_SECONDS.observe(time.perf_counter() - started)
        return appended
