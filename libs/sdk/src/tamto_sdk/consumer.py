"""The consumer: one credit-controlled Consume stream, batches decoded once."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Mapping
from functools import partial
from types import TracebackType
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
    Closed,
    DataLoss,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    TamtoError,
    Unauthenticated,
    Unavailable,
    UndecodableBatch,
    from_rpc_error,
    from_status,
)
from tamto_sdk.messages import Message, MessageBatch, _delivered, _Rows
from tamto_sdk.pending_acks import PendingAcks, merge_ranges, ranges_of, within_limit
from tamto_sdk.positions import Start, StartPosition, SubscriptionType
from tamto_sdk.subscriptions import Subscriptions

__all__ = ["Consumer"]

_CLOSE_FLUSH_TIMEOUT_S = 5.0
# A stream that stayed up this long counts as healthy: retrying starts afresh.
_HEALTHY_SESSION_S = 5.0
_MAX_NACK_DELAY_MS = (1 << 32) - 1  # PartitionNacks.delay_ms is a uint32
#: The longest reason `Consumer.term` takes (the router refuses longer ones).
_MAX_TERM_REASON = 1024


class Consumer:
    """Receives messages of one subscription on one stream.

    Use as an async context manager (``async with client.consumer("s", "sub") as c``).
    Iterate (``async for message in c``) for `Message` objects, or call
    `receive_batch` for vectorised `MessageBatch` objects backed by pyarrow.

    Flow control: the consumer grants its window of messages up front and grants more
    as the application takes messages (whenever half the window was taken), so at
    most a window of messages is buffered or in flight at any time from each router
    that owns some of the stream's partitions (the gateway gives every one of them
    the whole grant: a share stranded on an idle router could stop the stream). The
    window is `credits`, or without it one that grows while the application waits on
    credit (`tamto_sdk.credit_window`). Acks are
    coalesced into offset ranges and sent in the background shortly after `ack`
    (and on close). If the stream fails with a
    retriable error the consumer reconnects with backoff and subscribes again; the
    server then redelivers whatever was not acked, so delivery is at-least-once.
    `nack` asks for a redelivery (at once or after a delay) and is sent at once,
    as are `term` (never redeliver: to the dead-letter stream now) and
    `in_progress` (restart a message's ack timeout).
    """

    def __init__(
        self,
        calls: Calls,
        stream: str,
        subscription: str,
        *,
        type: SubscriptionType = SubscriptionType.EXCLUSIVE,
        start: StartPosition | None = None,
        credits: int | None = None,
        consumer_name: str | None = None,
    ) -> None:
        if not isinstance(type, SubscriptionType):
            raise TypeError(f"type must be a SubscriptionType, not {type!r}")
        self._calls = calls
        self._stream = stream
        self._subscription = subscription
        self._type = type
        self._consumer_name = consumer_name
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

    @property
    def stream(self) -> str:
        """The stream consumed."""
        return self._stream

    @property
    def subscription(self) -> str:
        """The subscription name."""
        return self._subscription

    @property
    def subscription_type(self) -> SubscriptionType:
        """How the consumers of the subscription share its messages."""
        return self._type

    @property
    def consumer_name(self) -> str | None:
        """The name sent to the server (orders failover consumers), if any."""
        return self._consumer_name

    @property
    def reconnects(self) -> int:
        """How many times the consume stream has been re-established."""
        return self._reconnects

    async def start(self) -> None:
        """Open the consume stream in the background; `__aenter__` calls it."""
        if self._closing:
            raise Closed("consumer is closed")
        if self._runner is None:
            loop = asyncio.get_running_loop()
            self._runner = loop.create_task(self._run(), name=f"tamto-consumer-{self._stream}")
            self._writer = loop.create_task(
                self._write_loop(), name=f"tamto-consumer-writer-{self._stream}"
            )

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- receiving ---------------------------------------------------------

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        """The next message; stops when the consumer is closed, raises its fatal error."""
        while True:
            index = self._iter_pos
            if index < len(self._iter_offsets):
                assert self._iter_rows is not None
                self._iter_pos = index + 1
                self._taken_since_grant += 1
                # `_took`, inlined, once: whoever crosses the refill point asks for
                # credit, and the writer resets the count when it sends it.
                if self._taken_since_grant == self._refill_at:
                    self._took(0)
                return _delivered(self._iter_rows, index, self._iter_offsets[index])
            batch = await self._next_batch(None)
            if batch is None:
                raise StopAsyncIteration
            self._iter_batch = batch
            self._iter_rows = batch._rows()
            self._iter_offsets = batch.offset_list()
            self._iter_pos = 0

    async def receive_batch(
        self, max_messages: int = 1000, timeout_s: float | None = None
    ) -> MessageBatch:
        """Up to `max_messages` consecutive messages of one partition, decoded once.

        Waits up to `timeout_s` (forever when None) for data and returns an empty
        batch if none arrives. Raises `Closed` once the consumer is closed, or the
        error that stopped it.
        """
        if max_messages <= 0:
            raise ValueError("max_messages must be positive")
        if self._iter_batch is not None and self._iter_pos < len(self._iter_offsets):
            batch = self._iter_batch.slice(self._iter_pos, max_messages)
            self._iter_pos += len(batch)
            self._took(len(batch))
            return batch
        batch_or_none = await self._next_batch(timeout_s)
        if batch_or_none is None:
            if self._closing:
                raise Closed("consumer is closed")
            return MessageBatch.empty(self._stream)
        batch = batch_or_none
        if len(batch) > max_messages:
            self._buffer.appendleft(batch.slice(max_messages))
            batch = batch.slice(0, max_messages)
        self._took(len(batch))
        return batch

    async def _next_batch(self, timeout_s: float | None) -> MessageBatch | None:
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while not self._buffer:
            if self._error is not None:
                raise self._error
            if self._closing:
                return None
            self._grow_window()
            self._data.clear()
            if deadline is None:
                await self._data.wait()
            else:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                try:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
                    # cancellation that coincides with data arriving.
                    async with asyncio.timeout(remaining):
                        await self._data.wait()
                except TimeoutError:
                    return None
        item = self._buffer.popleft()
        if isinstance(item, UndecodableBatch):
            self._took(item.count)
            raise item
        return item

    def _grow_window(self) -> None:
        """Nothing buffered: an automatic window may grow (`CreditWindow.grow`), and
        the extra credit goes at once."""
        extra = self._window.grow()
        if extra:
            self._refill_at = self._window.refill_at
            self._taken_since_grant += extra
            self._took(0)

    def _took(self, count: int) -> None:
        self._taken_since_grant += count
        if self._taken_since_grant >= self._refill_at:
            # Credit is due: send it now, with whatever acks are pending (no linger).
            self._flush_now.set()
            self._wake_writer.set()

    # -- acknowledging -----------------------------------------------------

    def ack(self, item: Message | MessageBatch | UndecodableBatch) -> None:
        """Acknowledge a message or every message of a batch (an `UndecodableBatch`:
        skip its messages).

        Acks are coalesced into offset ranges and sent in the background within
        `ClientOptions.ack_linger_s`; `flush_acks` and `close` send them at once.
        """
        if type(item) is Message:
            # The per-message path, kept short: it runs once per message consumed.
            rows = item._rows
            if self._closing or rows.stream != self._stream:
                self._check_ackable(rows.stream)
            offset = item._offset
            runs = self._pending.acks.get(rows.partition)
            if runs is not None and offset == runs.last + 1:
                # The next offset of the open run (the common case): no allocation and
                # no wake-up: the writer was woken for this run and has not taken it.
                runs.last = offset
            else:
                self._add_ack(rows.partition, offset, offset)
            return
        self._check_ackable(item.stream)
        if isinstance(item, MessageBatch | UndecodableBatch):
            for first, last in item.offset_ranges():
                self._add_ack(item.partition, first, last)
        else:
            self._add_ack(item.partition, item.offset, item.offset)

    def ack_cumulative(self, message: Message) -> None:
        """Acknowledge `message` and every earlier offset delivered on its partition.

        This includes messages that were nacked earlier: once acked cumulatively,
        a nacked message that has not been redelivered yet is not redelivered.

        Only for exclusive, failover and multicast subscriptions, where one
        consumer receives every message of a partition in order. On a shared or
        key-shared subscription "every earlier offset" includes messages other
        consumers hold, so, as in Pulsar, it raises `FailedPrecondition`: ack
        each message (or batch) with `ack`. (The router enforces the same rule:
        on those types an ack never settles offsets in flight to another consumer.)
        """
        self._check_ackable(message.stream)
        if self._type in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED):
            raise FailedPrecondition(
                f"ack_cumulative is not allowed on a {self._type.value} subscription: "
                "other consumers hold earlier offsets; ack messages individually"
            )
        low = min(self._low_water.get(message.partition, message.offset), message.offset)
        self._add_ack(message.partition, low, message.offset)
        self._low_water[message.partition] = max(
            self._low_water.get(message.partition, 0), message.offset + 1
        )

    def _check_ackable(self, stream: str) -> None:
        if self._closing:
            raise Closed("consumer is closed")
        if stream != self._stream:
            raise InvalidArgument(f"{stream!r} is not the stream of this consumer")

    def nack(self, item: Message | MessageBatch | UndecodableBatch, delay_s: float = 0.0) -> None:
        """Ask for a message, or every message of a batch, to be redelivered.

        The server redelivers at once, or after `delay_s` seconds (millisecond
        precision, at most about 49 days), with `delivery_count` one higher;
        past the stream's ``max_deliveries`` the message goes to the dead-letter
        stream instead. Nacks are coalesced into offset ranges like acks but are
        sent without lingering. A nack that has not reached the server when the
        stream breaks is dropped: the new stream redelivers every unacked message
        anyway (without the delay). Raises `Closed` after `close`.
        """
        self._check_ackable(item.stream)
        if not math.isfinite(delay_s) or delay_s < 0:
            raise ValueError("delay_s must be a finite, non-negative number of seconds")
        delay_ms = round(delay_s * 1000)
        if delay_ms > _MAX_NACK_DELAY_MS:
            raise ValueError(f"delay_s must be at most {_MAX_NACK_DELAY_MS / 1000} seconds")
        ranges = (
            item.offset_ranges()
            if isinstance(item, MessageBatch | UndecodableBatch)
            else [(item.offset,) * 2]
        )
        if not ranges:
            return
        self._pending.add_nack(item.partition, delay_ms, ranges)
        self._acks_flushed.clear()
        self._flush_now.set()
        self._wake_writer.set()

    def term(self, item: Message | MessageBatch | UndecodableBatch, reason: str = "") -> None:
        """Give up on a message, or every message of a batch, for good.

        The server never redelivers it: it moves it to the stream's dead-letter
        stream at once (whatever ``max_deliveries`` says), with the header
        ``tamto.dlq.reason`` set to ``"term: <reason>"`` (``"term"`` without a
        reason), and acks it. Sent without lingering, like `nack`; a term that has
        not reached the server when the stream breaks is dropped, and the new
        stream redelivers the message (term it again). Only messages delivered to
        this consumer and not acked are affected. Raises `Closed` after `close`.
        """
        self._check_ackable(item.stream)
        if len(reason) > _MAX_TERM_REASON:
            raise InvalidArgument(f"reason must be at most {_MAX_TERM_REASON} characters")
        for ranges in within_limit(ranges_of(item)):
            self._send_soon(
                messages_pb2.ConsumeRequest(
                    term=messages_pb2.PartitionTerms(
                        partition=item.partition, ranges=ranges, reason=reason
                    )
                )
            )

    def in_progress(self, item: Message | MessageBatch) -> None:
        """Say a message, or every message of a batch, is still being worked on:
        its ack timeout (the stream's ``ack_timeout_ms``) starts again from when the
        server gets this, so a slow handler is not redelivered to another consumer.
        Call it again before each timeout runs out. Sent without lingering; raises
        `Closed` after `close`.
        """
        self._check_ackable(item.stream)
        for ranges in within_limit(ranges_of(item)):
            self._send_soon(
                messages_pb2.ConsumeRequest(
                    in_progress=messages_pb2.PartitionProgress(
                        partition=item.partition, ranges=ranges
                    )
                )
            )

    async def seek(self, to: StartPosition | Mapping[int, int]) -> None:
        """Move this consumer's subscription to `to` (`Start.earliest()`,
        `Start.latest()`, `Start.offset(n)`, `Start.time(moment)` or partition ->
        offset) and read on from there: acks so far are flushed first, messages
        received and not yet taken are dropped, and the consumer reconnects (as
        every consumer of the subscription does: Pulsar's reset-cursor).

        Exclusive, failover and multicast consumers may seek (a multicast one moves
        only its own cursor). Shared and key-shared ones raise `FailedPrecondition`:
        other consumers share the cursor, so seek it with `client.subscriptions.seek`.
        """
        if self._type in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED):
            raise FailedPrecondition(
                f"a {self._type.value} consumer cannot seek: the subscription's other "
                "consumers share its cursor (use client.subscriptions.seek)"
            )
        await self.flush_acks()
        cursor = self._subscription
        if self._type is SubscriptionType.MULTICAST:
            cursor = f"{self._subscription}~{self._consumer_name}"
        await Subscriptions(self._calls).seek(self._stream, cursor, to)
        self._buffer.clear()
        self._drop_iteration()

    def _drop_iteration(self) -> None:
        """Forget the batch `async for` was walking (its messages come again)."""
        self._iter_batch = None
        self._iter_rows = None
        self._iter_offsets = []
        self._iter_pos = 0

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

    def _has_pending(self) -> bool:
        return self._pending.has_pending()

    def _add_ack(self, partition: int, first: int, last: int) -> None:
        self._pending.add_ack(partition, first, last)
        self._acks_flushed.clear()
        self._wake_writer.set()

    # -- background: the stream and its writer -----------------------------

    def _subscribe_request(self) -> Any:
        return messages_pb2.ConsumeRequest(
            subscribe=messages_pb2.Subscribe(
                stream=self._stream,
                subscription=self._subscription,
                start=self._start._to_proto(),
                type=self._type._to_proto(),
                consumer_name=self._consumer_name or "",
            )
        )

    async def _run(self) -> None:
        """Keeps one consume stream open, reconnecting on retriable failures."""
        backoff: Backoff | None = None  # created at the first failure after a healthy session
        reauthenticated = False
        first = True
        while not self._closing:
            metadata: Metadata = ()
            error: TamtoError
            self._received_in_session = False
            self._session_started = 0.0
            try:
                metadata = await self._calls.auth.metadata()
                await self._session(metadata, first)
                error = Unavailable("the server ended the consume stream")
            except grpc.aio.AioRpcError as exc:
                error = from_rpc_error(exc)
            except TamtoError as exc:
                error = exc
            except BatchFormatError as exc:
                error = DataLoss(f"undecodable batch from the server: {exc}")
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

    # -- closing -----------------------------------------------------------

    async def close(self) -> None:
        """Send pending acks and nacks, end the stream and stop the background tasks.

        Idempotent.
        """
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

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
