"""Consume sessions: one consumer stream attached to subscriptions on partitions.

A session is one consumer's session from a gateway: a `Consume` stream of its
own, or one of the sessions of the gateway's `ConsumeMux` stream (`consume_mux`,
the same code either way). It owns a `ConsumerSlot`
(its credit and outbox) and attaches it to the `Subscription` of every
partition it reads; subscriptions put deliveries into the outbox, and the
session streams them out. Leaving detaches the slot everywhere, which makes the
subscriptions redeliver whatever the session left unacked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import structlog

from tamto_common.errors import InvalidArgument, OutOfRange, TamtoError
from tamto_common.session_stop import WAKE, SessionStop
from tamto_router.acks import AckSet
from tamto_router.cursors import commit_cursor, get_cursor
from tamto_router.dead_letters import Policy, Publish
from tamto_router.partition_log import PartitionLog
from tamto_router.partitions import Partitions
from tamto_router.subscription import ConsumerSlot, Delivery, Subscription, SubscriptionType

logger = structlog.get_logger(__name__)

StartKind = Literal["earliest", "latest", "offset", "time"]


@dataclass(frozen=True)
class Start:
    kind: StartKind
    value: int = 0  # the offset, or the time in µs since the epoch


@dataclass(frozen=True)
class SubscribeSpec:
    stream: str
    subscription: str
    start: Start
    partitions: tuple[int, ...]
    type: SubscriptionType = SubscriptionType.EXCLUSIVE
    consumer_name: str = ""
    #: The client's address as its gateway saw it ("" when not known).
    client_address: str = ""
    #: The consumer's own id, the same in each of its sessions ("": none). A session
    #: with the id of one still attached takes its place (`Subscription.attach`).
    consumer_id: str = ""

    @property
    def cursor_name(self) -> str:
        """Whose acks these are: the subscription's, or for multicast the consumer's own."""
        if self.type is SubscriptionType.MULTICAST:
            return f"{self.subscription}~{self.consumer_name}"
        return self.subscription


PolicyLookup = Callable[[str], Awaitable[Policy]]
"""Looks up a stream's delivery policy (ack timeout, limits, dead-letter stream)."""


class SubscriptionRegistry:
    """Finds or creates the `Subscription` for (stream, partition, name)."""

    def __init__(
        self,
        partitions: Partitions,
        policy: PolicyLookup,
        read_max: int,
        publish_dead: Publish | None = None,
        cursor_commit_s: float = 0.05,
        max_consumers: int = 0,
    ) -> None:
        self._partitions = partitions
        self._max_consumers = max_consumers
        self._policy = policy
        self._read_max = read_max
        self._publish_dead = publish_dead
        self._cursor_commit_s = cursor_commit_s
        self._locks: dict[tuple[str, int, str], asyncio.Lock] = {}
        #: The client address of each attached consumer session, by slot id.
        self.addresses: dict[int, str] = {}

    def lock(self, stream: str, partition: int, name: str) -> asyncio.Lock:
        """Held while the subscription is loaded; administration holds it to change one."""
        return self._locks.setdefault((stream, partition, name), asyncio.Lock())

    async def get(self, spec: SubscribeSpec, partition: int) -> Subscription:
        async with self.lock(spec.stream, partition, spec.cursor_name):
            log = await self._partitions.get(spec.stream, partition)
            current = log.subscriptions.get(spec.cursor_name)
            if isinstance(current, Subscription) and not current.closed:
                return current
            acks = await self._load_cursor(log, spec)
            policy = await self._policy(spec.stream)
            created = Subscription(
                log,
                spec.cursor_name,
                acks,
                policy,
                self._read_max,
                self._publish_dead,
                commit_interval_s=self._cursor_commit_s,
                max_consumers=self._max_consumers,
            )
            log.subscriptions[spec.cursor_name] = created
            return created

    async def _load_cursor(self, log: PartitionLog, spec: SubscribeSpec) -> AckSet:
        stored = await get_cursor(log, spec.cursor_name)
        if stored is not None:
            return stored
        start = spec.start
        if start.kind != "latest":
            # The start storage holds now, not the one known since the log opened:
            # retention may have moved it, and what it removed must not be read.
            await log.follow_start()
        if start.kind == "earliest":
            floor = log.start_offset
        elif start.kind == "latest":
            floor = log.durable_offset
        elif start.kind == "time":
            floor = await log.storage.offset_for_time(log.stream, log.partition, start.value)
        else:
            if start.value < log.start_offset:
                raise OutOfRange(
                    f"start offset {start.value} is below {log.stream}/{log.partition}'s "
                    f"start offset {log.start_offset}: retention removed what came before"
                )
            if not log.start_offset <= start.value <= log.durable_offset:
                raise InvalidArgument(
                    f"start offset {start.value} is outside {log.stream}/{log.partition}'s "
                    f"stored range [{log.start_offset}, {log.durable_offset}]"
                )
            floor = start.value
        acks = AckSet(floor)
        # Fix the start now, so "latest" means the moment the subscription was created.
        await commit_cursor(log, spec.cursor_name, acks)
        return acks


#: Longest a consumer's clean leave waits for its acks to be committed.
_LEAVE_COMMIT_S = 5.0


class ConsumeSession(SessionStop):
    def __init__(self, spec: SubscribeSpec, registry: SubscriptionRegistry) -> None:
        self.spec = spec
        self._registry = registry
        self.slot = ConsumerSlot(spec.consumer_name, spec.consumer_id)
        self._subscriptions: dict[int, Subscription] = {}
        self._acked: set[Subscription] = set()  # whose cursors this session changed
        self._stopped: asyncio.Task[None] | None = None
        #: Set when the client sent `close`: only then is its leave a clean one.
        self.closed_by_client = False
        #: The error a request of the client caused (the session then ends with it).
        self.failure: TamtoError | None = None

    async def __aenter__(self) -> ConsumeSession:
        self._registry.addresses[self.slot.id] = self.spec.client_address
        try:
            for p in self.spec.partitions:
                subscription = await self._registry.get(self.spec, p)
                subscription.attach(self.slot, self.spec.type)
                self._subscriptions[p] = subscription
        except BaseException:
            self._detach()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        # A clean leave is an explicit `close` from the client, never the mere end
        # of its stream: a consumer killed with SIGKILL may look half-closed, and
        # what it held must use up a delivery. Any orderly end (no exception)
        # commits the last acks before the stream ends, so they stick.
        self._detach(exc_type is None and self.closed_by_client)
        if exc_type is None:
            await self._flush_acks(list(self._acked))

    @staticmethod
    async def _flush_acks(subscriptions: list[Subscription]) -> None:
        for subscription in subscriptions:
            try:
                async with asyncio.timeout(_LEAVE_COMMIT_S):
                    await subscription.flush_acks()
            except (TamtoError, TimeoutError) as exc:  # redelivered: at-least-once holds
                logger.warning(
                    "acks not committed at a consumer's leave",
                    subscription=subscription.name,
                    error=str(exc),
                )

    def _detach(self, graceful: bool = False) -> None:
        self._registry.addresses.pop(self.slot.id, None)
        for subscription in self._subscriptions.values():
            subscription.detach(self.slot, graceful)
        self._subscriptions.clear()

    def grant(self, messages: int) -> None:
        self.slot.credit.grant(messages)
        for subscription in self._subscriptions.values():
            subscription.poke()

    def _subscription(self, partition: int) -> Subscription:
        subscription = self._subscriptions.get(partition)
        if subscription is None:
            raise InvalidArgument(f"partition {partition} is not part of this session")
        return subscription

    async def ack(self, partition: int, ranges: list[tuple[int, int]]) -> None:
        subscription = self._subscription(partition)
        if subscription.closed:
            # Reloaded (its log failed over) while this session's acks were in
            # flight: they belong to the subscription's live state, not the old one.
            subscription = await self._registry.get(self.spec, partition)
        await subscription.ack(ranges, self.slot)
        self._acked.add(subscription)

    def nack(self, partition: int, ranges: list[tuple[int, int]], delay_s: float) -> None:
        self._subscription(partition).nack(ranges, delay_s, self.slot)

    async def term(self, partition: int, ranges: list[tuple[int, int]], reason: str) -> None:
        subscription = self._subscription(partition)
        await subscription.term(ranges, reason, self.slot)
        self._acked.add(subscription)

    def in_progress(self, partition: int, ranges: list[tuple[int, int]]) -> None:
        self._subscription(partition).in_progress(ranges, self.slot)

    def close_cleanly(self) -> None:
        """The client said it is leaving on purpose (see `__aexit__`)."""
        self.closed_by_client = True

    def _wake(self) -> None:
        self.slot.outbox.put_nowait(WAKE)

    def deliveries(self) -> AsyncIterator[Delivery]:
        """What the subscriptions hand this session, as they hand it out, until the
        session stops (`SessionStop`): the consumer half-closed, or broke a rule."""
        return self.drain(self.slot.outbox)
