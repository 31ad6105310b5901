"""A connection's subscriptions: what SUBSCRIBE and UNSUBSCRIBE change, the sources
delivering them (`sources`), and the session's record in etcd.

A filter is granted when its stream levels name a stream the identity may consume
from (`consume` permission): QoS up to 2 on a persistent stream, 0 on an ephemeral
one. Anything else (no such stream, no permission, a filter whose wildcards span
streams, an ephemeral pattern the stream's rules refuse) is SUBACK's failure 0x80
for that filter alone; a refusal for want of permission is audited as for gRPC.

A persistent session (clean session 0) keeps its filters in etcd (`state`) and
its messages in one durable Tamto subscription per stream (`subscription_name`):
whichever gateway the client comes back to resumes both. A clean session's Tamto
subscriptions have names of their own and are deleted when it ends.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import TYPE_CHECKING

import structlog

from tamto_common.errors import FailedPrecondition, TamtoError
from tamto_common.policy import Permission
from tamto_gateway.mqtt import codec
from tamto_gateway.mqtt.sources import EphemeralSource, PersistentSource, Source
from tamto_gateway.mqtt.state import StoredSession, subscription_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from tamto_gateway.mqtt.context import Identity, Shared
    from tamto_gateway.mqtt.outbound import Outbound
    from tamto_gateway.mqtt.topics import Address

log = structlog.get_logger(__name__)

#: QoS granted at most on a persistent stream.
MAX_QOS = 2
#: How long deleting a subscription waits for consumers still attached to leave (an
#: older connection of the client, on another gateway, closing), and how often it tries.
DELETE_WAIT_S = 10.0
DELETE_RETRY_S = 0.2


class Subscriptions:
    """One connection's subscriptions (module docstring)."""

    def __init__(
        self,
        shared: Shared,
        identity: Identity,
        outbound: Outbound,
        client_id: str,
        session: StoredSession | None,
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self._shared = shared
        self._identity = identity
        self._outbound = outbound
        self._client_id = client_id
        self._session = session  # None: a clean session
        self._subscription = (
            subscription_name(client_id) if session is not None else f"mqtt-{secrets.token_hex(16)}"
        )
        self._on_failure = on_failure
        self._persistent: dict[str, PersistentSource] = {}
        self._ephemeral: dict[str, EphemeralSource] = {}  # by stream
        self._lock = asyncio.Lock()

    async def restore(self) -> None:
        """Resume a persistent session's filters (one now refused is dropped from it)."""
        if self._session is None or not self._session.subscriptions:
            return
        await self.subscribe(list(self._session.subscriptions.items()), retained=False)

    async def subscribe(self, filters: list[tuple[str, int]], retained: bool = True) -> list[int]:
        """SUBACK's return codes for `filters`, then their retained messages sent."""
        codes = []
        granted: list[tuple[Address, int]] = []
        async with self._lock:
            for topic_filter, qos in filters:
                code = await self._subscribe_one(topic_filter, qos)
                codes.append(code)
                if code != codec.SUBSCRIPTION_FAILED:
                    granted.append((self._shared.rule.filter(topic_filter), code))
            await self._save()
        if retained:
            asyncio.get_running_loop().call_soon(self._send_retained_soon, granted)
        return codes

    async def _subscribe_one(self, topic_filter: str, qos: int) -> int:
        try:
            address = self._shared.rule.filter(topic_filter)
            call = await self._identity.call()
            principal = await self._shared.guard.principal(
                call.invocation_metadata(), call.peer(), "MqttSubscribe"
            )
            await self._shared.guard.require(
                principal, Permission.CONSUME, address.stream, call.peer(), "MqttSubscribe"
            )
            stream = await self._shared.streams.describe(address.stream)
            if stream.ephemeral:
                granted = await self._ephemeral_filter(topic_filter, address)
            else:
                granted = await self._persistent_filter(address, min(qos, MAX_QOS))
        except TamtoError as exc:
            log.info("mqtt subscription refused", filter=topic_filter, reason=str(exc))
            if self._session is not None:
                self._session.subscriptions.pop(topic_filter, None)
            return codec.SUBSCRIPTION_FAILED
        if self._session is not None:
            self._session.subscriptions[topic_filter] = granted
        return granted

    async def _ephemeral_filter(self, topic_filter: str, address: Address) -> int:
        _ = address.ephemeral_pattern  # `InvalidArgument` for a level no topic can have
        source = self._ephemeral.get(address.stream)
        filters = set() if source is None else set(source.filters)
        if address.rest not in filters:
            await self._ephemeral_filters(address, filters | {address.rest})
        return 0

    async def _ephemeral_filters(self, address: Address, filters: set[tuple[str, ...]]) -> None:
        """Replace the stream's ephemeral source by one for `filters` (none: closed).
        The old one is closed first: at most once, as ephemeral streams are."""
        old = self._ephemeral.pop(address.stream, None)
        if old is not None:
            await old.close()
        if filters:
            source = EphemeralSource(self._shared, self._identity, self._outbound, address, filters)
            await source.start(self._client_id)
            self._watch(source.task)
            self._ephemeral[address.stream] = source

    async def _persistent_filter(self, address: Address, qos: int) -> int:
        source = self._persistent.get(address.stream)
        if source is None:
            source = PersistentSource(self._shared, self._identity, self._outbound, address)
            source.filters[address.rest] = qos
            await source.start(self._subscription, self._client_id)
            self._watch(source.task)
            self._persistent[address.stream] = source
        source.filters[address.rest] = qos
        return qos

    def _watch(self, task: asyncio.Task[None] | None) -> None:
        def ended(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                self._on_failure(task.exception())  # type: ignore[arg-type]

        if task is not None:
            task.add_done_callback(ended)

    def _send_retained_soon(self, granted: list[tuple[Address, int]]) -> None:
        task = asyncio.create_task(self._send_retained(granted), name="mqtt-retained")
        self._watch(task)

    async def _send_retained(self, granted: list[tuple[Address, int]]) -> None:
        for address, qos in granted:
            for message in await self._shared.state.retained(self._shared.rule, address):
                await self._outbound.deliver(
                    message.topic, message.payload, min(qos, message.qos), retain=True
                )

    async def unsubscribe(self, filters: list[str]) -> None:
        async with self._lock:
            for topic_filter in filters:
                await self._unsubscribe_one(topic_filter)
            await self._save()

    async def _unsubscribe_one(self, topic_filter: str) -> None:
        if self._session is not None:
            self._session.subscriptions.pop(topic_filter, None)
        try:
            address = self._shared.rule.filter(topic_filter)
        except TamtoError:
            return
        ephemeral = self._ephemeral.get(address.stream)
        if ephemeral is not None:
            if address.rest in ephemeral.filters:
                await self._ephemeral_filters(address, set(ephemeral.filters) - {address.rest})
            return
        source = self._persistent.get(address.stream)
        if source is None or source.filters.pop(address.rest, None) is None:
            return
        if not source.filters:  # the stream's last filter: its subscription goes too
            del self._persistent[address.stream]
            await source.close()
            await delete_subscription(self._shared, address.stream, self._subscription)

    async def _save(self) -> None:
        if self._session is not None:
            await self._shared.state.save_session(self._client_id, self._session)

    async def close(self) -> None:
        """Stop every source; a clean session's Tamto subscriptions are deleted."""
        sources: list[Source] = [*self._persistent.values(), *self._ephemeral.values()]
        await asyncio.gather(*(s.close() for s in sources), return_exceptions=True)
        if self._session is None:
            for stream in self._persistent:
                await delete_subscription(self._shared, stream, self._subscription)
        self._persistent.clear()
        self._ephemeral.clear()


async def delete_subscription(shared: Shared, stream: str, subscription: str) -> None:
    """Delete a Tamto subscription MQTT made, on every partition (logged if it fails:
    it is the gateway's own cleanup, not the client's request)."""
    deadline = asyncio.get_running_loop().time() + DELETE_WAIT_S
    while True:
        try:
            definition = await shared.streams.describe(stream)
            await asyncio.gather(
                *(
                    shared.upstream.delete_subscription(stream, p, subscription)
                    for p in range(definition.partitions)
                )
            )
            return
        except FailedPrecondition as exc:  # a connection of the client still leaving
            if asyncio.get_running_loop().time() > deadline:
                log.warning("mqtt subscription not deleted", stream=stream, error=str(exc))
                return
            await asyncio.sleep(DELETE_RETRY_S)
        except Exception as exc:
            log.warning("mqtt subscription not deleted", stream=stream, error=str(exc))
            return


async def discard_session(shared: Shared, client_id: str, session: StoredSession) -> None:
    """Forget a persistent session: its record and its Tamto subscriptions."""
    name = subscription_name(client_id)
    streams = set()
    for topic_filter in session.subscriptions:
        try:
            streams.add(shared.rule.filter(topic_filter).stream)
        except TamtoError:
            continue
    for stream in streams:
        await delete_subscription(shared, stream, name)
    await shared.state.drop_session(client_id)
