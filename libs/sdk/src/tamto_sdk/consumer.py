"""The consumer: what an application calls to receive and settle messages.

`Consumer` iterates messages (or takes `MessageBatch`es), acks, nacks, terms and
seeks; the stream it reads from, its credit and its ack writer are
`tamto_sdk.consume_stream`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping

from tamto_protocol.v1 import messages_pb2
from tamto_sdk._lifecycle import AsyncClosing
from tamto_sdk.consume_stream import ConsumeStream
from tamto_sdk.errors import (
    Closed,
    FailedPrecondition,
    InvalidArgument,
    UndecodableBatch,
)
from tamto_sdk.messages import Message, MessageBatch, _delivered
from tamto_sdk.pending_acks import ranges_of, within_limit
from tamto_sdk.positions import StartPosition, SubscriptionType
from tamto_sdk.subscriptions import Subscriptions

__all__ = ["Consumer"]

_MAX_NACK_DELAY_MS = (1 << 32) - 1  # PartitionNacks.delay_ms is a uint32
#: The longest reason `Consumer.term` takes (the router refuses longer ones).
_MAX_TERM_REASON = 1024


class Consumer(ConsumeStream, AsyncClosing):
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
        """Open the consume stream in the background; `async with` calls it."""
        if self._closing:
            raise Closed("consumer is closed")
        if self._runner is None:
            loop = asyncio.get_running_loop()
            self._runner = loop.create_task(self._run(), name=f"tamto-consumer-{self._stream}")
            self._writer = loop.create_task(
                self._write_loop(), name=f"tamto-consumer-writer-{self._stream}"
            )

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

    async def close(self) -> None:
        """Send pending acks and nacks, end the stream and stop the background tasks.

        Idempotent.
        """
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _open(self) -> None:
        await self.start()
