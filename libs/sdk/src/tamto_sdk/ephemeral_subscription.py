"""The ephemeral subscription: what an ephemeral stream gets from now on, at most once.

`EphemeralSubscription` (`client.subscribe`) is an async iterator of
`EphemeralMessage` (or of whole `EphemeralBatch`es, `batches()`), selecting topics
with a RabbitMQ topic pattern, alone or as a member of a group; it subscribes again
when its gateway goes away.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from typing import Any

import grpc

from tamto_protocol.v1 import gateway_pb2
from tamto_sdk._calls import Calls
from tamto_sdk._deprecated import renamed_method
from tamto_sdk._lifecycle import AsyncClosing
from tamto_sdk._retry import Backoff
from tamto_sdk.ephemeral_messages import EphemeralBatch, EphemeralMessage, single_message
from tamto_sdk.errors import Closed, TamtoError, Unauthenticated, Unavailable, from_rpc_error

__all__ = ["DELIVERIES_PER_EVENT", "EphemeralSubscription"]

#: Deliveries a subscription takes per gRPC message, when its gateway has that many
#: buffered (`SubscribeEphemeralRequest.max_deliveries_per_event`).
DELIVERIES_PER_EVENT = 64


class EphemeralSubscription(AsyncClosing):
    """A consumer of an ephemeral stream (see the module docstring).

    `async with client.subscribe(...) as sub` (or `await sub.start()`) returns once
    the gateway has it in place: from then on it receives what is published.
    Iterating starts it too. `dropped` counts messages lost to a full buffer.

    When its gateway goes away (killed, restarted, the connection lost) the
    subscription subscribes again through the client's address with the
    client's retry backoff (`ClientOptions`: within a second of a gateway
    serving again), until `retry_deadline_s`; then iteration raises the error.
    What was published while it was away, and what its old gateway had buffered
    for it, is lost (at most once). `reconnects` counts the times it did.
    """

    def __init__(
        self,
        calls: Calls,
        stream: str,
        *,
        match: str | None,
        group: str,
        consumer_name: str,
        single_messages: bool = False,
    ) -> None:
        self._calls = calls
        # `single_messages`: requests sent as one message come as one (iterating
        # messages skips Arrow; a batch is still made for `receive_batch`).
        self._request = gateway_pb2.SubscribeEphemeralRequest(
            stream=stream,
            group=group,
            consumer_name=consumer_name,
            max_deliveries_per_event=DELIVERIES_PER_EVENT,
            single_messages=single_messages,
        )
        if match is not None:
            self._request.match = match
        self._call: Any = None
        self._pending: list[EphemeralMessage] = []
        #: Deliveries that came in the same event as the one last returned.
        self._queued: collections.deque[Any] = collections.deque()
        self.entity = ""
        self.dropped = 0
        self.reconnects = 0
        self._closed = False

    async def start(self) -> EphemeralSubscription:
        """Open the subscription; returns once it is live. Raises what the gateway refused."""
        if self._call is not None:
            return self
        if self._closed:
            raise Closed("subscription is closed")
        for attempt in (1, 2):
            metadata = await self._calls.auth.metadata()
            self._call = self._calls.stub.SubscribeEphemeral(self._request, metadata=metadata)
            try:
                first = await self._read()
            except Unauthenticated:
                if attempt == 2:
                    raise
                await self._calls.auth.renew_after_rejection(metadata)
                continue
            if first is None and not self._closed:
                raise Unavailable("the gateway ended the subscription before it started")
            if first is None or first.WhichOneof("event") != "subscribed":
                raise Closed("the subscription ended before it started")
            self.entity = first.subscribed.entity
            return self
        raise AssertionError("unreachable")

    async def _read(self) -> Any:
        try:
            data = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            if self._closed and exc.code() == grpc.StatusCode.CANCELLED:
                return None
            # Reading changes nothing at the gateway: a connection torn down mid-call
            # is a lost connection (Unavailable), safe to subscribe again after.
            raise from_rpc_error(exc, deduplicated=True) from None
        return None if data is grpc.aio.EOF else data

    async def receive_batch(self) -> EphemeralBatch | None:
        """The next batch delivered, or None once the subscription was closed."""
        delivery = await self._next_delivery()
        return None if delivery is None else self._batch(delivery)

    async def _next_delivery(self) -> Any:
        """The next `EphemeralDelivery`, or None once the subscription was closed."""
        if self._queued:
            return self._queued.popleft()
        await self.start()
        while True:
            try:
                event = await self._read()
            except TamtoError as exc:
                if self._closed or not exc.retriable:
                    raise
                await self._resubscribe(exc)
                continue
            if event is None:
                if self._closed:
                    return None
                # Only a gateway shutting down ends a subscription: subscribe again.
                await self._resubscribe(Unavailable("the gateway ended the subscription"))
                continue
            if event.WhichOneof("event") == "delivery":
                self._queued.extend(event.more_deliveries)
                return event.delivery

    def _batch(self, delivery: Any) -> EphemeralBatch:
        batch = EphemeralBatch._from_delivery(delivery)
        self.dropped += batch.dropped
        return batch

    async def _resubscribe(self, error: TamtoError) -> None:
        """Subscribe again after `error` ended the call, with the client's backoff;
        raise the last error once `retry_deadline_s` is spent or one is not retriable."""
        backoff = Backoff(self._calls.options)
        while not self._closed:
            if self._call is not None:
                self._call.cancel()
                self._call = None
            try:
                await self.start()
            except TamtoError as exc:
                if self._closed or not exc.retriable:
                    raise
                error = exc
            else:
                self.reconnects += 1
                return
            delay = backoff.next_delay()
            if delay is None:
                raise error
            await asyncio.sleep(delay)

    async def batches(self) -> AsyncIterator[EphemeralBatch]:
        """Every batch delivered, until the subscription ends."""
        while (batch := await self.receive_batch()) is not None:
            yield batch

    def __aiter__(self) -> EphemeralSubscription:
        return self

    async def __anext__(self) -> EphemeralMessage:
        while not self._pending:
            delivery = await self._next_delivery()
            if delivery is None:
                raise StopAsyncIteration
            if delivery.HasField("message"):
                self.dropped += delivery.dropped
                return single_message(delivery)
            self._pending = list(self._batch(delivery))
            self._pending.reverse()
        return self._pending.pop()

    async def close(self) -> None:
        """Leave: nothing more is delivered to this consumer. Idempotent."""
        self._closed = True
        self._queued.clear()
        if self._call is not None:
            self._call.cancel()

    async def _open(self) -> None:
        await self.start()

    next_batch = renamed_method(receive_batch, "EphemeralSubscription.next_batch")
