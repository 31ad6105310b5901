"""The consumer's stream: one credit-controlled Consume stream, kept open in the background.

`ConsumeStream` holds what a `Consumer` shares with its two background tasks: the
session (`_run`: subscribe, grant credit, read deliveries into the buffer, reconnect
with backoff on retriable failures) and the writer (`_write_loop`: send credit when
half the window was taken, and the coalesced acks, nacks and verbs). `Consumer`
(`tamto_sdk.consumer`) adds what the application calls.

Every session subscribes with the consumer's own id (`Subscribe.consumer_id`, drawn
once): a session that comes back after a failure takes the place of its predecessor
where a router still counts that one attached (its stream cut without the router
noticing yet), instead of being refused by an exclusive subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from functools import partial
from typing import Any

import grpc

from tamto_protocol.batch import BatchFormatError
from tamto_protocol.delivery_wire import WireError, parse_consume_error, parse_consume_response
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_sdk._calls import Calls
from tamto_sdk._retry import Backoff
from tamto_sdk.auth import Metadata
from tamto_sdk.credit_window import CreditWindow
from tamto_sdk.errors import (
    DataLoss,
    Internal,
    TamtoError,
    Unauthenticated,
    Unavailable,
    UndecodableBatch,
    from_rpc_error,
    from_status,
)
from tamto_sdk.messages import MessageBatch, _Rows
from tamto_sdk.pending_acks import PendingAcks, merge_ranges
from tamto_sdk.positions import Start, StartPosition, SubscriptionType

__all__ = ["ConsumeStream"]

_CLOSE_FLUSH_TIMEOUT_S = 5.0
# A stream that stayed up this long counts as healthy: retrying starts afresh.
_HEALTHY_SESSION_S = 5.0


class ConsumeStream:
    """The state and background tasks of one consumer's stream (module docstring)."""

    def __init__(
        self,
        calls: Calls,
        stream: str,
        subscription: str,
        *,
        subscription_type: SubscriptionType = SubscriptionType.EXCLUSIVE,
        start: StartPosition | None = None,
        credits: int | None = None,
        consumer_name: str | None = None,
    ) -> None:
        if not isinstance(subscription_type, SubscriptionType):
            raise TypeError(
                f"subscription_type must be a SubscriptionType, not {subscription_type!r}"
            )
        self._calls = calls
        self._stream = stream
        self._subscription = subscription
        self._type = subscription_type
        self._consumer_name = consumer_name
        self._consumer_id = uuid.uuid4().hex
        self._start = start if start is not None else Start.earliest()
        self._window = CreditWindow(credits)
        self._refill_at = self._window.refill_at
        self._options = calls.options

        self._buffer: deque[MessageBatch | UndecodableBatch] = deque()
        self._data = asyncio.Event()
        # The batch `async for` walks: its shared columns, its offsets and the next index.
        self._iter_batch: MessageBatch | None = None
        self._iter_rows: _Rows | None = None
        self._iter_offsets: list[int] = []
        self._iter_pos = 0
        self._taken_since_grant = 0

        self._pending = PendingAcks()
        self._low_water: dict[int, int] = {}
        self._acks_flushed = asyncio.Event()
        self._acks_flushed.set()
        self._flush_now = asyncio.Event()  # cuts the ack linger short

        self._call: Any = None
        self._session_id = 0
        self._state = asyncio.Condition()
        self._wake_writer = asyncio.Event()
        self._write_lock = asyncio.Lock()  # one write at a time on the stream
        self._reconnects = 0
        self._received_in_session = False
        self._session_started = 0.0

        self._error: TamtoError | None = None
        self._closing = False
        self._runner: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None

    def _has_pending(self) -> bool:
        return self._pending.has_pending()

    def _add_ack(self, partition: int, first: int, last: int) -> None:
        self._pending.add_ack(partition, first, last)
        self._acks_flushed.clear()
        self._wake_writer.set()

    def _send_soon(self, request: Any) -> None:
        self._pending.verbs.append(request)
        self._acks_flushed.clear()
        self._flush_now.set()
        self._wake_writer.set()

    async def flush_acks(self, timeout_s: float | None = None) -> None:
        """Send every pending ack and nack now and wait until they have been written
        to the stream."""
        if not self._has_pending():
            return
        self._flush_now.set()
        self._wake_writer.set()
        await asyncio.wait_for(self._acks_flushed.wait(), timeout_s)

    def _drop_iteration(self) -> None:
        """Forget the batch `async for` was walking (its messages come again)."""
        self._iter_batch = None
        self._iter_rows = None
        self._iter_offsets = []
        self._iter_pos = 0

    def _subscribe_request(self) -> Any:
        return messages_pb2.ConsumeRequest(
            subscribe=messages_pb2.Subscribe(
                stream=self._stream,
                subscription=self._subscription,
                start=self._start._to_proto(),
                type=self._type._to_proto(),
                consumer_name=self._consumer_name or "",
                consumer_id=self._consumer_id,
            )
        )

    async def _run(self) -> None:
        """Keeps one consume stream open, reconnecting on retriable failures."""
        backoff: Backoff | None = None  # created at the first failure after a healthy session
        reauthenticated = False
        first = True
        while not self._closing:
            error, metadata = await self._session_ended(first)
            first = False
            if self._closing:
                return
            if self._healthy_session():
                backoff = None
                reauthenticated = False
            if backoff is None:
                backoff = Backoff(self._options)
            if isinstance(error, Internal):
                # grpc reports a write racing with the server ending the call as a
                # generic INTERNAL error that hides the real status. Ask the server
                # directly (re-authenticating if needed); reconnect if that works.
                try:
                    await self._probe()
                except TamtoError as exc:
                    if not exc.retriable:
                        self._fail(exc)
                        return
                error = Unavailable(f"consume stream failed: {error.message}")
            if isinstance(error, Unauthenticated) and not reauthenticated:
                reauthenticated = True
                try:
                    await self._calls.auth.renew_after_rejection(metadata)
                except TamtoError as exc:
                    self._fail(exc)
                    return
                continue
            if not error.retriable:
                self._fail(error)
                return
            delay = backoff.next_delay()
            if delay is None:
                self._fail(error)
                return
            await asyncio.sleep(delay)

    async def _session_ended(self, first: bool) -> tuple[TamtoError, Metadata]:
        """Run one session to its end: the error that ended it, and the credentials it used."""
        metadata: Metadata = ()
        self._received_in_session = False
        self._session_started = 0.0
        try:
            metadata = await self._calls.auth.metadata()
            await self._session(metadata, first)
            return Unavailable("the server ended the consume stream"), metadata
        except grpc.aio.AioRpcError as exc:
            return from_rpc_error(exc), metadata
        except TamtoError as exc:
            return exc, metadata
        except BatchFormatError as exc:
            return DataLoss(f"undecodable batch from the server: {exc}"), metadata

    def _healthy_session(self) -> bool:
        """Whether the session that just ended worked (so retrying starts over)."""
        if self._received_in_session:
            return True
        lasted = asyncio.get_running_loop().time() - self._session_started
        return self._session_started > 0 and lasted >= _HEALTHY_SESSION_S

    async def _probe(self) -> None:
        await self._calls.unary(
            self._calls.stub.DescribeStream,
            gateway_pb2.DescribeStreamRequest(name=self._stream),
            retry=False,
        )

    async def _session(self, metadata: Metadata, first: bool) -> None:
        self._session_started = asyncio.get_running_loop().time()
        call = self._calls.consume_raw(metadata=metadata)
        try:
            await _write_or_raise(call, self._subscribe_request())
            # Whatever was buffered will be redelivered by the new session, and so
            # will whatever was nacked and not sent yet.
            self._buffer.clear()
            self._pending.new_session()
            if not self._has_pending():
                self._acks_flushed.set()
            self._drop_iteration()
            self._taken_since_grant = 0
            await _write_or_raise(
                call,
                messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=self._window.size)),
            )
            if not first:
                self._reconnects += 1
            async with self._state:
                self._call = call
                self._session_id += 1
                self._state.notify_all()
            self._wake_writer.set()
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return
                ending = parse_consume_error(response)
                if ending is not None:
                    raise await self._server_ending(call, *ending)
                try:
                    # The batch stays inside the response bytes: no copy.
                    delivery = parse_consume_response(response)
                except WireError as exc:
                    raise DataLoss(f"undecodable response from the server: {exc}") from None
                if delivery is not None:
                    self._received_in_session = True
                    self._on_delivery(delivery, len(response))
        finally:
            async with self._state:
                self._call = None
                self._state.notify_all()
            call.cancel()

    async def _server_ending(self, call: Any, code: int, message: str) -> TamtoError:
        """The server announced the status it ends the stream with: stop writing,
        half-close and let it end. That status is the answer, whatever gRPC reports
        next (a write racing with the end would make it INTERNAL)."""
        async with self._state:
            self._call = None  # the writer takes no new writes to this stream
        async with self._write_lock:
            with contextlib.suppress(Exception):
                await call.done_writing()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_CLOSE_FLUSH_TIMEOUT_S):
                while await call.read() is not grpc.aio.EOF:
                    pass
        status = next((s for s in grpc.StatusCode if s.value[0] == code), grpc.StatusCode.UNKNOWN)
        return from_status(status, message)

    def _on_delivery(self, delivery: Any, nbytes: int) -> None:
        try:
            batch = MessageBatch._from_delivery(delivery)
        except BatchFormatError as exc:
            # Raised to the application in the batch's place; the stream goes on.
            self._buffer.append(_undecodable(delivery, str(exc)))
            self._data.set()
            return
        if len(batch) == 0:
            return
        self._window.delivered(nbytes, len(batch))
        low = self._low_water.get(batch.partition)
        if low is None or batch.first_offset < low:
            self._low_water[batch.partition] = batch.first_offset
        self._buffer.append(batch)
        self._data.set()

    async def _write_loop(self) -> None:
        """Sends credits and coalesced acks and nacks on the current stream."""
        dead_session = -1
        while True:
            await self._wake_writer.wait()
            self._wake_writer.clear()
            linger = self._options.ack_linger_s
            if self._has_pending() and not self._flush_now.is_set() and linger > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(linger):  # not wait_for: close cancels this
                        await self._flush_now.wait()
            async with self._state:
                await self._state.wait_for(partial(self._usable_session, dead_session))
                call, session = self._call, self._session_id
            requests: list[Any] = []
            # Credit goes once it is due (half the window taken), not with every ack
            # flush: each credit is a stream message through two hops, and at a few
            # thousand messages a second acks flush every 10 ms.
            if self._taken_since_grant >= self._refill_at:
                credit = self._taken_since_grant
                self._taken_since_grant = 0
                requests.append(
                    messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=credit))
                )
            acks = self._pending.take_acks()
            nacks = self._pending.take_nacks()
            verbs = self._pending.take_verbs()
            requests.extend([*acks, *nacks, *verbs])
            self._pending.writing = bool(acks or nacks or verbs)
            self._flush_now.clear()
            try:
                async with self._write_lock:
                    for request in requests:
                        await call.write(request)
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                # The session died; acks go out again on the next one (nacks do
                # not: the next session redelivers every unacked message).
                self._pending.writing = False
                for request in acks:
                    for r in request.ack.ranges:
                        self._add_ack(request.ack.partition, r.first, r.last)
                dead_session = session
                self._wake_writer.set()
                continue
            self._pending.writing = False
            if not self._has_pending():
                self._acks_flushed.set()

    def _usable_session(self, dead_session: int) -> bool:
        return self._call is not None and self._session_id != dead_session

    def _fail(self, error: TamtoError) -> None:
        self._error = error
        self._data.set()

    async def _close(self) -> None:
        if self._has_pending() and self._call is not None and self._error is None:
            with contextlib.suppress(TimeoutError):
                await self.flush_acks(_CLOSE_FLUSH_TIMEOUT_S)
        self._closing = True
        self._data.set()
        call = self._call
        if call is not None and self._runner is not None:
            # Say we are leaving (a clean close hands unacked messages back without
            # using up a delivery; the end of a stream alone does not), half-close,
            # and let the server end the stream, so that everything written (the
            # last acks) reaches it before the call is torn down.
            with contextlib.suppress(Exception):
                async with self._write_lock:
                    await call.write(messages_pb2.ConsumeRequest(close=messages_pb2.Close()))
                    await call.done_writing()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._runner), _CLOSE_FLUSH_TIMEOUT_S)
        for task in (self._writer, self._runner):
            if task is not None:
                task.cancel()
        for task in (self._writer, self._runner):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def _write_or_raise(call: Any, request: Any) -> None:
    """Write to a consume stream; if the server already ended it, raise its status.

    grpc refuses a write on a finished call with InvalidStateError, which says
    nothing about why it finished (e.g. the gateway answered UNAVAILABLE at once).
    """
    try:
        await call.write(request)
    except (asyncio.InvalidStateError, grpc.aio.UsageError):
        raise from_status(await call.code(), await call.details()) from None


def _undecodable(delivery: Any, reason: str) -> UndecodableBatch:
    """The error a delivery that cannot be decoded is raised as, naming its offsets."""
    stored = delivery.batch
    offsets = list(delivery.offsets) or list(
        range(int(stored.base_offset), int(stored.base_offset) + int(stored.count))
    )
    return UndecodableBatch(
        reason,
        stream=delivery.stream,
        partition=int(delivery.partition),
        offset_ranges=merge_ranges([(o, o) for o in offsets]),
        delivery_count=int(delivery.delivery_count) or 1,
    )
