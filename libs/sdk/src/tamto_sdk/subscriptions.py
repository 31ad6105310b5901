"""Subscription administration, stream stats and peek: what a consumer is doing and
how to steer it. Reach it as `client.subscriptions`.

`describe` answers "how far behind is it": per partition its cursor, the
partition's end, the backlog in messages and (estimated) bytes, what is in
flight and the age of the oldest message not acked. `seek` moves the cursor as
Pulsar's reset-cursor does: consumers attached are disconnected, reconnect on
their own, and read on from the new position (messages acked past it come
again); `skip` acknowledges the next N messages (or all: the backlog is
cleared) and disconnects nobody. The subscription stays durable throughout.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_sdk._calls import Calls
from tamto_sdk.errors import InvalidArgument, NotFound, Unavailable, UndecodableBatch
from tamto_sdk.messages import MessageBatch, publish_time_of
from tamto_sdk.overview import SubscriptionSummary
from tamto_sdk.positions import Start, StartPosition
from tamto_sdk.stream_config import StreamInfo, StreamKind
from tamto_sdk.subscription_info import (
    ConsumerInfo,
    PartitionStats,
    StreamStats,
    SubscriptionInfo,
    SubscriptionPartitionInfo,
    summarize,
)

__all__ = [
    "ConsumerInfo",
    "PartitionStats",
    "StreamStats",
    "SubscriptionInfo",
    "SubscriptionPartitionInfo",
    "SubscriptionSummary",
    "Subscriptions",
]

#: The largest skip the wire carries: more than any backlog.
_SKIP_ALL = 2**64 - 1


def _target(to: StartPosition) -> messages_pb2.SeekTarget:
    """The seek target of a start position (the two messages' fields share names)."""
    start = to._to_proto()
    which = start.WhichOneof("position")
    return messages_pb2.SeekTarget(**{which: getattr(start, which)})


#: How long the all-streams overview waits for one stream before leaving it out.
OVERVIEW_STREAM_WAIT_S = 10.0


class Subscriptions:
    """Subscription administration; reach it as `client.subscriptions`.

    `list`, `describe`, `seek` and `skip` need `consume` on the stream, `delete`
    needs `admin`. An unknown stream or subscription raises `NotFound` naming
    it; an offset outside a partition's stored range `OutOfRange` with the range.
    """

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def list(self, stream: str) -> list[str]:
        """The stream's subscriptions, sorted (a multicast consumer's own cursor is
        listed as ``"<subscription>~<consumer>"``)."""
        response = await self._calls.unary(
            self._calls.stub.ListSubscriptions,
            gateway_pb2.ListSubscriptionsRequest(stream=stream),
        )
        return list(response.subscriptions)

    async def describe(self, stream: str, subscription: str) -> SubscriptionInfo:
        """Where the subscription is on each partition it has a cursor on, its backlog,
        what is in flight and to whom (see `SubscriptionPartitionInfo`)."""
        response = await self._calls.unary(
            self._calls.stub.DescribeSubscription,
            gateway_pb2.DescribeSubscriptionRequest(stream=stream, subscription=subscription),
        )
        return SubscriptionInfo._from_proto(response)

    async def seek(
        self,
        stream: str,
        subscription: str,
        to: StartPosition | Mapping[int, int] | timedelta,
        *,
        partitions: Sequence[int] | None = None,
        dry_run: bool = False,
    ) -> SubscriptionInfo:
        """Move the cursor to `to`: `Start.earliest()`, `Start.latest()` (skip all),
        `Start.offset(n)` (on every partition), `Start.time(moment)` (the first
        message published at or after it), a `timedelta` (that long ago: the first
        message published since), or a mapping partition -> offset.
        `partitions` limits a position to those partitions (default: every one the
        subscription has a cursor on).

        All or none: every partition is validated first, and an offset outside one's
        stored range (`OutOfRange`) moves no cursor. With `dry_run` nothing moves:
        each partition's `seek_to` is where its ack floor would go.

        Consumers attached are disconnected; they reconnect on their own and read
        on from the new position (Pulsar's reset-cursor). Messages acked past it
        are delivered again.
        """
        if isinstance(to, timedelta):
            to = Start.time(datetime.now(UTC) - to)
        if isinstance(to, StartPosition):
            request = gateway_pb2.SeekSubscriptionRequest(
                stream=stream,
                subscription=subscription,
                target=_target(to),
                partitions=list(partitions or ()),
                dry_run=dry_run,
            )
        else:
            if partitions is not None:
                raise InvalidArgument("offsets per partition name their partitions already")
            if not to:
                raise InvalidArgument("seek needs at least one partition -> offset")
            request = gateway_pb2.SeekSubscriptionRequest(
                stream=stream, subscription=subscription, offsets=dict(to), dry_run=dry_run
            )
        return await self._seek(request)

    async def shift(
        self,
        stream: str,
        subscription: str,
        by: int,
        *,
        partitions: Sequence[int] | None = None,
        dry_run: bool = False,
    ) -> SubscriptionInfo:
        """Move each partition's cursor (its ack floor) `by` offsets, back when
        negative, clamped to the stored range (Kafka's ``--shift-by``); otherwise
        as `seek`."""
        request = gateway_pb2.SeekSubscriptionRequest(
            stream=stream,
            subscription=subscription,
            target=messages_pb2.SeekTarget(shift=by),
            partitions=list(partitions or ()),
            dry_run=dry_run,
        )
        return await self._seek(request)

    async def _seek(self, request: gateway_pb2.SeekSubscriptionRequest) -> SubscriptionInfo:
        response = await self._calls.unary(self._calls.stub.SeekSubscription, request, retry=False)
        return SubscriptionInfo._from_proto(response)

    async def skip(
        self,
        stream: str,
        subscription: str,
        count: int | None = None,
        *,
        partitions: Sequence[int] | None = None,
        dry_run: bool = False,
    ) -> SubscriptionInfo:
        """Acknowledge the next `count` unacked messages on each partition (None:
        all of them, clearing the backlog). Nobody is disconnected. With `dry_run`
        nothing is acked: `seek_to` is where each ack floor would go."""
        if count is not None and count <= 0:
            raise InvalidArgument(f"skip needs a positive count, got {count}")
        # More than any backlog: everything (an ack, not a seek to the end).
        target = messages_pb2.SeekTarget(skip=_SKIP_ALL if count is None else count)
        request = gateway_pb2.SeekSubscriptionRequest(
            stream=stream,
            subscription=subscription,
            target=target,
            partitions=list(partitions or ()),
            dry_run=dry_run,
        )
        return await self._seek(request)

    async def peek(
        self,
        stream: str,
        subscription: str,
        count: int = 1,
        *,
        partitions: Sequence[int] | None = None,
    ) -> builtins.list[MessageBatch]:
        """The next `count` messages (at most 1000) the subscription would get on each
        partition (default: every one it has a cursor on): those not acked, from its
        ack floor, in flight ones included. Nothing is delivered or acked
        (``pulsar-admin topics peek-messages -s``)."""
        if partitions is None:
            info = await self.describe(stream, subscription)
            partitions = [p.partition for p in info.partitions]
        batches: builtins.list[MessageBatch] = []
        for partition in partitions:
            batches.extend(
                await get_messages(
                    self._calls, stream, partition, 0, count, subscription=subscription
                )
            )
        return batches

    async def overview(self, stream: str | None = None) -> builtins.list[SubscriptionSummary]:
        """One row per subscription of `stream` (None: of every persistent stream the
        caller may see): backlog, unacked, the publish rate into it, consumers, the
        age of the oldest message not acked and dead letters (`SubscriptionSummary`).
        Without `stream`, a stream whose partitions cannot be reached now (no quorum,
        its router restarting; still retrying after `OVERVIEW_STREAM_WAIT_S`, not the
        client's whole retry deadline) is left out rather than failing the whole overview;
        `tamto status` names what is unavailable and why."""
        if stream is not None:
            names = [stream]
        else:
            listed = await self._calls.unary(
                self._calls.stub.ListStreams, gateway_pb2.ListStreamsRequest()
            )
            infos = [StreamInfo._from_proto(s) for s in listed.streams]
            names = [i.name for i in infos if i.kind is StreamKind.PERSISTENT]
        if stream is not None:
            return await self._overview_of(stream)
        rows = await asyncio.gather(*(self._reachable_overview_of(name) for name in names))
        return [row for stream_rows in rows for row in stream_rows]

    async def _reachable_overview_of(self, stream: str) -> builtins.list[SubscriptionSummary]:
        try:
            async with asyncio.timeout(OVERVIEW_STREAM_WAIT_S):
                return await self._overview_of(stream)
        except (Unavailable, NotFound, TimeoutError):
            # unreachable now (or still retrying at the wait's end), or deleted since listed
            return []

    async def _overview_of(self, stream: str) -> builtins.list[SubscriptionSummary]:
        stats = await stream_stats(self._calls, stream)

        async def one(name: str) -> SubscriptionSummary | None:
            try:
                return summarize(await self.describe(stream, name), stats)
            except NotFound:  # deleted since it was listed
                return None

        found = await asyncio.gather(*(one(name) for name in await self.list(stream)))
        return [row for row in found if row is not None]

    async def delete(self, stream: str, subscription: str) -> bool:
        """Remove the subscription's cursors; `FailedPrecondition` while consumers
        are attached."""
        response = await self._calls.unary(
            self._calls.stub.DeleteSubscription,
            gateway_pb2.DeleteSubscriptionRequest(stream=stream, subscription=subscription),
        )
        return bool(response.deleted)


async def stream_stats(calls: Calls, stream: str) -> StreamStats:
    """Per partition: stored range, bytes on disk, publish rate, owner."""
    response = await calls.unary(
        calls.stub.DescribeStreamStats, gateway_pb2.DescribeStreamRequest(name=stream)
    )
    return StreamStats(
        stream=response.stream,
        partitions=tuple(
            PartitionStats(
                partition=int(p.partition),
                start_offset=int(p.start_offset),
                end_offset=int(p.end_offset),
                messages=int(p.messages),
                wal_bytes=int(p.wal_bytes),
                segment_bytes=int(p.segment_bytes),
                publish_rate=float(p.publish_rate),
                owner=p.owner,
            )
            for p in response.partitions
        ),
    )


async def get_messages(
    calls: Calls, stream: str, partition: int, offset: int, count: int, subscription: str = ""
) -> list[MessageBatch]:
    """The stored messages [offset, offset + count) of one partition, or with
    `subscription` the next `count` it has not acked; nothing is acked or delivered."""
    response = await calls.unary(
        calls.stub.GetMessages,
        gateway_pb2.GetMessagesRequest(
            stream=stream,
            partition=partition,
            offset=offset,
            count=count,
            subscription=subscription,
        ),
    )
    return [_stored_batch(stream, partition, b) for b in response.batches]


def _stored_batch(stream: str, partition: int, stored: Any) -> MessageBatch:
    """A `StoredBatch` read by `get_messages`; `UndecodableBatch` if it fails the checks."""
    from tamto_protocol.batch import BatchFormatError, decode_valid_batch  # pyarrow: messages only

    first = int(stored.base_offset)
    try:
        record_batch = decode_valid_batch(stored.arrow_ipc)
        publish_time = publish_time_of(int(stored.publish_time_us))
    except BatchFormatError as exc:
        raise UndecodableBatch(
            str(exc),
            stream=stream,
            partition=partition,
            offset_ranges=[(first, first + max(int(stored.count), 1) - 1)],
            delivery_count=0,
        ) from None
    return MessageBatch(
        stream=stream,
        partition=partition,
        first_offset=first,
        publish_time=publish_time,
        record_batch=record_batch,
        delivery_count=0,
    )
