"""HTTP consumers: a gateway consume session held for an HTTP client between requests.

An `HttpConsumer` runs the gateway's own Consume handler (the same fan-out to the
routers, the same checks) with requests it queues for the client: credits, acks
and nacks by offset, and a clean close. Deliveries are decoded into messages and
held until a transport (`transports`: long poll, server-sent events, WebSocket)
hands them out. A session's failure (an in-band error of a router, a refusal) is
kept and raised to the next reader.

`Consumers` names each session with an unguessable id and lets only the identity
that opened it use it. A session nobody asked for anything for `idle_s` is closed
(unacked messages go back to the subscription), unless a transport holds it open.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from tamto_common.errors import NotFound, ResourceExhausted, Unavailable
from tamto_common.grpc_errors import error_for
from tamto_common.tasks import cancel_and_wait
from tamto_gateway.http.auth import HttpCall
from tamto_gateway.http.message_json import delivered
from tamto_gateway.http.model import Position, ReceivedMessage
from tamto_protocol.v1 import messages_pb2

if TYPE_CHECKING:
    from tamto_gateway.grpc_api import GatewayServicer

#: Longest a clean close waits for the routers to apply the consumer's last acks.
CLOSE_WAIT_S = 10.0


class HttpConsumer:
    """One consume session (module docstring)."""

    def __init__(
        self,
        servicer: GatewayServicer,
        call: HttpCall,
        subscribe: messages_pb2.Subscribe,
        subject: str,
    ) -> None:
        self.id = secrets.token_urlsafe(18)
        self.subject = subject
        self.stream = subscribe.stream
        self.subscription = subscribe.subscription
        self._servicer = servicer
        self._call = call
        self._requests: asyncio.Queue[messages_pb2.ConsumeRequest | None] = asyncio.Queue()
        self._requests.put_nowait(messages_pb2.ConsumeRequest(subscribe=subscribe))
        self._inbox: deque[ReceivedMessage] = deque()
        self._arrived = asyncio.Event()
        self._unused_credit = 0
        self.failure: BaseException | None = None
        self.pinned = False  # a transport holds it open: never closed as idle
        self._task = asyncio.create_task(self._run(), name=f"http-consumer-{self.id[:6]}")

    @property
    def ended(self) -> bool:
        return self._task.done()

    async def _requests_of_client(self) -> AsyncIterator[messages_pb2.ConsumeRequest]:
        while (request := await self._requests.get()) is not None:
            yield request

    async def _run(self) -> None:
        try:
            async for raw in self._servicer.Consume(self._requests_of_client(), self._call):
                response = messages_pb2.ConsumeResponse.FromString(raw)
                if response.WhichOneof("response") == "error":
                    # The handler waits for the client's half-close before ending.
                    self.failure = error_for(response.error.code, response.error.message)
                    self._requests.put_nowait(None)
                    continue
                messages = delivered(response.delivery)
                self._unused_credit = max(0, self._unused_credit - len(messages))
                self._inbox.extend(messages)
                self._arrived.set()
        except Exception as exc:
            self.failure = self.failure or exc
        finally:
            if self.failure is None:
                self.failure = Unavailable("the consume session ended")
            self._arrived.set()

    def credit(self, messages: int) -> None:
        """Let the routers send `messages` more."""
        if messages > 0:
            self._unused_credit += messages
            self._send(messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=messages)))

    def ack(self, positions: Iterable[Position]) -> None:
        for partition, ranges in _ranges(positions).items():
            acks = messages_pb2.PartitionAcks(partition=partition, ranges=ranges)
            self._send(messages_pb2.ConsumeRequest(ack=acks))

    def nack(self, positions: Iterable[Position], delay_ms: int) -> None:
        for partition, ranges in _ranges(positions).items():
            nacks = messages_pb2.PartitionNacks(
                partition=partition, ranges=ranges, delay_ms=delay_ms
            )
            self._send(messages_pb2.ConsumeRequest(nack=nacks))

    def _send(self, request: messages_pb2.ConsumeRequest) -> None:
        self._raise_if_ended()
        self._requests.put_nowait(request)

    def _raise_if_ended(self) -> None:
        if self.ended and not self._inbox:
            assert self.failure is not None
            raise self.failure

    async def pull(self, max_messages: int, wait_s: float) -> list[ReceivedMessage]:
        """Up to `max_messages`, waiting up to `wait_s` for the first: credit is granted
        for what is asked and neither held here nor granted already (a pull)."""
        wanted = max_messages - len(self._inbox) - self._unused_credit
        if wanted > 0:
            self.credit(wanted)
        await self.wait(wait_s)
        return self.take(max_messages)

    async def wait(self, timeout_s: float | None) -> None:
        """Until a message is held or the session ended, or `timeout_s` passed."""
        if not self._inbox and not self.ended:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._arrived.wait()
        self._raise_if_ended()

    def take(self, max_messages: int | None = None) -> list[ReceivedMessage]:
        """What is held, up to `max_messages` (None: all)."""
        count = len(self._inbox) if max_messages is None else min(max_messages, len(self._inbox))
        return [self._inbox.popleft() for _ in range(count)]

    async def close(self, clean: bool = True) -> None:
        """Leave cleanly: acks sent are committed, unacked messages go back at once.
        Not `clean`: as a client that vanished, whose unacked deliveries count (the
        next one of each says so: MQTT's DUP)."""
        if not self.ended:
            if clean:
                close = messages_pb2.ConsumeRequest(close=messages_pb2.Close())
                self._requests.put_nowait(close)
            self._requests.put_nowait(None)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await asyncio.shield(self._task)
        await cancel_and_wait(self._task)


def _ranges(positions: Iterable[Position]) -> dict[int, list[messages_pb2.OffsetRange]]:
    """Offsets per partition as ranges of consecutive offsets."""
    by_partition: dict[int, list[int]] = {}
    for p in positions:
        by_partition.setdefault(p.partition, []).append(p.offset)
    out: dict[int, list[messages_pb2.OffsetRange]] = {}
    for partition, offsets in by_partition.items():
        ranges: list[messages_pb2.OffsetRange] = []
        for offset in sorted(set(offsets)):
            if ranges and ranges[-1].last == offset - 1:
                ranges[-1].last = offset
            else:
                ranges.append(messages_pb2.OffsetRange(first=offset, last=offset))
        out[partition] = ranges
    return out


class Consumers:
    """The open HTTP consumers of this gateway, by id (module docstring)."""

    def __init__(self, idle_s: float, most: int = 10_000) -> None:
        self._idle_s = idle_s
        self._most = most
        self._by_id: dict[str, HttpConsumer] = {}
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._by_id)

    def check_room(self) -> None:
        """RESOURCE_EXHAUSTED when `--http-max-consumers` are open."""
        if len(self._by_id) >= self._most:
            raise ResourceExhausted(
                f"{self._most} HTTP consumers are open on this gateway "
                "(--http-max-consumers): close some or use another gateway"
            )

    def add(self, consumer: HttpConsumer) -> None:
        self._by_id[consumer.id] = consumer
        self.touch(consumer)

    def get(self, consumer_id: str, subject: str) -> HttpConsumer:
        """The consumer `consumer_id` of `subject` (NOT_FOUND for anyone else's)."""
        consumer = self._by_id.get(consumer_id)
        if consumer is None or consumer.subject != subject:
            raise NotFound(f"consumer {consumer_id!r} does not exist (closed, or idle too long)")
        self.touch(consumer)
        return consumer

    def touch(self, consumer: HttpConsumer) -> None:
        """Start the consumer's idle time again (unless it is gone)."""
        handle = self._expiry.pop(consumer.id, None)
        if handle is not None:
            handle.cancel()
        if consumer.id not in self._by_id:
            return
        loop = asyncio.get_running_loop()
        self._expiry[consumer.id] = loop.call_later(self._idle_s, self._expire, consumer)

    def _expire(self, consumer: HttpConsumer) -> None:
        if consumer.pinned:
            self.touch(consumer)
            return
        self.remove_soon(consumer)

    def remove_soon(self, consumer: HttpConsumer) -> None:
        """`remove`, the close in a task of its own: for a transport whose own task is
        being cancelled (its client went away), which could not wait for the close."""
        self._forget(consumer)
        task = asyncio.create_task(consumer.close(), name=f"http-consumer-close-{consumer.id[:6]}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def remove(self, consumer: HttpConsumer) -> None:
        """Forget the consumer and close it."""
        self._forget(consumer)
        await consumer.close()

    def _forget(self, consumer: HttpConsumer) -> None:
        self._by_id.pop(consumer.id, None)
        handle = self._expiry.pop(consumer.id, None)
        if handle is not None:
            handle.cancel()

    async def close_all(self) -> None:
        await asyncio.gather(
            *(self.remove(c) for c in list(self._by_id.values())),
            *self._closing,
            return_exceptions=True,
        )
