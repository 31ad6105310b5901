"""The router's subscription-administration and stream-stats RPCs: protobuf in,
`SubscriptionAdmin` calls, protobuf out.

A mixin of `RouterServicer` (as the gateway's `SecurityApi` is of its servicer),
so `grpc_api.py` keeps the data path and these stay beside it.
"""

from __future__ import annotations

import grpc

from tamto_common.errors import InvalidArgument
from tamto_common.names import check_cursor_name, check_name
from tamto_protocol.v1 import messages_pb2, router_pb2
from tamto_router.admin import SubscriptionAdmin
from tamto_router.model import PartitionState, Seek, SubscriptionState
from tamto_router.stored_batch_proto import batch_to_proto

_TYPE_TO_PROTO = {
    "exclusive": messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE,
    "failover": messages_pb2.SUBSCRIPTION_TYPE_FAILOVER,
    "shared": messages_pb2.SUBSCRIPTION_TYPE_SHARED,
    "key_shared": messages_pb2.SUBSCRIPTION_TYPE_KEY_SHARED,
    "multicast": messages_pb2.SUBSCRIPTION_TYPE_MULTICAST,
}


def seek_from_proto(target: messages_pb2.SeekTarget) -> Seek:
    which = target.WhichOneof("target")
    if which == "earliest":
        return Seek("earliest")
    if which == "latest":
        return Seek("latest")
    if which == "offset":
        return Seek("offset", target.offset)
    if which == "time_us":
        if target.time_us < 0:
            raise InvalidArgument(f"seek time must be >= 0 µs, got {target.time_us}")
        return Seek("time", target.time_us)
    if which == "skip":
        return Seek("skip", target.skip)
    if which == "shift":
        return Seek("shift", target.shift)
    raise InvalidArgument("a seek must set one of earliest, latest, offset, time_us, skip or shift")


def subscription_to_proto(state: SubscriptionState) -> messages_pb2.SubscriptionPartition:
    return messages_pb2.SubscriptionPartition(
        seek_to=state.seek_to,
        partition=state.partition,
        exists=state.exists,
        start_offset=state.start_offset,
        ack_floor=state.ack_floor,
        position=state.position,
        end_offset=state.end_offset,
        backlog_messages=state.backlog_messages,
        backlog_bytes=state.backlog_bytes,
        unacked=state.unacked,
        oldest_unacked_publish_time_us=state.oldest_unacked_publish_time_us,
        redeliveries=state.redeliveries,
        dead_lettered=state.dead_lettered,
        type=_TYPE_TO_PROTO.get(state.type or "", messages_pb2.SUBSCRIPTION_TYPE_UNSPECIFIED),
        consumers=[
            messages_pb2.SubscriptionConsumer(
                name=c.name, address=c.address, credits=c.credits, unacked=c.unacked
            )
            for c in state.consumers
        ],
    )


def stats_to_proto(state: PartitionState) -> messages_pb2.PartitionStats:
    return messages_pb2.PartitionStats(
        partition=state.partition,
        start_offset=state.start_offset,
        end_offset=state.end_offset,
        messages=max(0, state.end_offset - state.start_offset),
        wal_bytes=state.wal_bytes,
        segment_bytes=state.segment_bytes,
        publish_rate=state.publish_rate,
        owner=state.owner,
    )


class AdminApi:
    """ListSubscriptions, DescribeSubscription, SeekSubscription, DeleteSubscription,
    GetPartitionStats and Read (see `tamto_router.admin`)."""

    _admin: SubscriptionAdmin

    async def ListSubscriptions(
        self, request: router_pb2.RouterPartitionRequest, context: grpc.aio.ServicerContext
    ) -> router_pb2.RouterListSubscriptionsResponse:
        check_name("stream", request.stream)
        names = await self._admin.names(request.stream, request.partition)
        return router_pb2.RouterListSubscriptionsResponse(subscriptions=names)

    async def DescribeSubscription(
        self, request: router_pb2.RouterSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.SubscriptionPartition:
        check_name("stream", request.stream)
        name = check_cursor_name(request.subscription)
        state = await self._admin.describe(request.stream, request.partition, name)
        return subscription_to_proto(state)

    async def SeekSubscription(
        self, request: router_pb2.RouterSeekRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.SubscriptionPartition:
        check_name("stream", request.stream)
        name = check_cursor_name(request.subscription)
        seek = seek_from_proto(request.target)
        state = await self._admin.seek(
            request.stream, request.partition, name, seek, dry_run=request.dry_run
        )
        return subscription_to_proto(state)

    async def DeleteSubscription(
        self, request: router_pb2.RouterSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> router_pb2.RouterDeleteSubscriptionResponse:
        check_name("stream", request.stream)
        name = check_cursor_name(request.subscription)
        deleted = await self._admin.delete(request.stream, request.partition, name)
        return router_pb2.RouterDeleteSubscriptionResponse(deleted=deleted)

    async def GetPartitionStats(
        self, request: router_pb2.RouterPartitionRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.PartitionStats:
        check_name("stream", request.stream)
        return stats_to_proto(await self._admin.stats(request.stream, request.partition))

    async def Read(
        self, request: router_pb2.RouterReadRequest, context: grpc.aio.ServicerContext
    ) -> router_pb2.RouterReadResponse:
        check_name("stream", request.stream)
        if request.subscription:
            name = check_cursor_name(request.subscription)
            batches = await self._admin.peek(
                request.stream, request.partition, name, request.max_messages
            )
        else:
            batches = await self._admin.read(
                request.stream, request.partition, request.from_offset, request.max_messages
            )
        return router_pb2.RouterReadResponse(batches=[batch_to_proto(b) for b in batches])
