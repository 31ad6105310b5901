"""The Gateway RPCs that look at and steer subscriptions, stream stats and peek.

A mixin of `GatewayServicer` (like `SecurityApi` and `EphemeralApi`): each call
is authorized here, then fanned out to the routers owning the stream's
partitions (`Upstream`), and the per-partition answers are put together.
ListSubscriptions, DescribeSubscription, SeekSubscription and GetMessages need
`consume` on the stream, DeleteSubscription `admin`, DescribeStreamStats any
permission. The routers' statuses (NOT_FOUND, OUT_OF_RANGE, FAILED_PRECONDITION)
come back as they are; what the gateway knows first it refuses itself.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import grpc

from tamto_common.errors import FailedPrecondition, InvalidArgument, NotFound
from tamto_common.lists import check_count
from tamto_common.names import check_cursor_name, check_name, consumer_label
from tamto_common.policy import Permission
from tamto_common.streams import MAX_PARTITIONS, StreamDef
from tamto_gateway.guarded import Guarded
from tamto_protocol.batch import slice_batch
from tamto_protocol.v1 import gateway_pb2, messages_pb2

if TYPE_CHECKING:
    from tamto_gateway.streams import StreamRegistry
    from tamto_gateway.upstream import Upstream

#: Most messages one GetMessages returns.
MAX_GET_MESSAGES = 1000


class SubscriptionsApi(Guarded):
    """Subscription administration, DescribeStreamStats and GetMessages (module docstring)."""

    _streams: StreamRegistry
    _upstream: Upstream

    async def _stored_stream(self, name: str) -> StreamDef:
        """The definition of persistent stream `name` (NOT_FOUND, FAILED_PRECONDITION)."""
        stream = await self._streams.describe(name, fresh=True)
        if stream.ephemeral:
            raise FailedPrecondition(
                f"stream {name!r} is ephemeral: it stores nothing and has no subscriptions"
            )
        return stream

    async def _describe_all(
        self, stream: StreamDef, subscription: str
    ) -> list[messages_pb2.SubscriptionPartition]:
        """The partitions the subscription has a cursor on; NOT_FOUND when none."""
        answers = await asyncio.gather(
            *(
                self._upstream.describe_subscription(stream.name, p, subscription)
                for p in range(stream.partitions)
            )
        )
        found = [a for a in answers if a.exists]
        if not found:
            raise NotFound(
                f"subscription {subscription!r} does not exist on stream {stream.name!r}"
            )
        return found

    async def ListSubscriptions(
        self, request: gateway_pb2.ListSubscriptionsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListSubscriptionsResponse:
        check_name("stream", request.stream)
        await self._authorize(context, Permission.CONSUME, request.stream, "ListSubscriptions")
        stream = await self._stored_stream(request.stream)
        answers = await asyncio.gather(
            *(self._upstream.list_subscriptions(stream.name, p) for p in range(stream.partitions))
        )
        names = sorted({name for names in answers for name in names})
        return gateway_pb2.ListSubscriptionsResponse(subscriptions=names)

    async def DescribeSubscription(
        self, request: gateway_pb2.DescribeSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.SubscriptionInfo:
        check_name("stream", request.stream)
        check_cursor_name(request.subscription)
        await self._authorize(context, Permission.CONSUME, request.stream, "DescribeSubscription")
        stream = await self._stored_stream(request.stream)
        found = await self._describe_all(stream, request.subscription)
        return gateway_pb2.SubscriptionInfo(
            stream=stream.name, subscription=request.subscription, partitions=found
        )

    async def SeekSubscription(
        self, request: gateway_pb2.SeekSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.SubscriptionInfo:
        check_name("stream", request.stream)
        name = check_cursor_name(request.subscription)
        check_count("partitions", len(request.partitions), MAX_PARTITIONS)
        check_count("offsets", len(request.offsets), MAX_PARTITIONS)
        await self._authorize(context, Permission.CONSUME, request.stream, "SeekSubscription")
        stream = await self._stored_stream(request.stream)
        has_target = request.HasField("target") and request.target.WhichOneof("target")
        if has_target and request.offsets:
            raise InvalidArgument("a seek sets either a target or offsets per partition, not both")
        if not has_target and not request.offsets:
            raise InvalidArgument(
                "a seek needs a target (earliest, latest, offset, time_us, skip) or offsets"
            )
        targets: dict[int, messages_pb2.SeekTarget]
        if request.offsets:
            targets = {p: messages_pb2.SeekTarget(offset=o) for p, o in request.offsets.items()}
        else:
            named = list(request.partitions)
            if not named:  # every partition the subscription has a cursor on
                named = [a.partition for a in await self._describe_all(stream, name)]
            targets = dict.fromkeys(named, request.target)
        outside = sorted(p for p in targets if p >= stream.partitions)
        if outside:
            raise InvalidArgument(
                f"stream {stream.name!r} has partitions 0-{stream.partitions - 1}, not {outside[0]}"
            )
        # All or none: every partition validates and resolves its move first (a dry
        # run); only then does any cursor move, each to the offset it resolved to.
        planned = await self._seek_each(stream.name, name, targets, dry_run=True)
        if not request.dry_run:
            resolved = {
                a.partition: targets[a.partition]
                if targets[a.partition].WhichOneof("target") == "skip"
                else messages_pb2.SeekTarget(offset=a.seek_to)
                for a in planned
            }
            planned = await self._seek_each(stream.name, name, resolved, dry_run=False)
        return gateway_pb2.SubscriptionInfo(
            stream=stream.name, subscription=name, partitions=planned
        )

    async def _seek_each(
        self,
        stream: str,
        name: str,
        targets: dict[int, messages_pb2.SeekTarget],
        dry_run: bool,
    ) -> list[messages_pb2.SubscriptionPartition]:
        answers = await asyncio.gather(
            *(
                self._upstream.seek_subscription(stream, p, name, target, dry_run=dry_run)
                for p, target in sorted(targets.items())
            )
        )
        return list(answers)

    async def DeleteSubscription(
        self, request: gateway_pb2.DeleteSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.DeleteSubscriptionResponse:
        check_name("stream", request.stream)
        name = check_cursor_name(request.subscription)
        principal = await self._authorize(
            context, Permission.ADMIN, request.stream, "DeleteSubscription"
        )
        stream = await self._stored_stream(request.stream)
        found = await self._describe_all(stream, name)
        attached = [a for a in found if a.consumers]
        if attached:
            who = sorted({consumer_label(c.name, c.address) for a in attached for c in a.consumers})
            raise FailedPrecondition(
                f"subscription {name!r} on stream {stream.name!r} has consumers attached "
                f"({', '.join(who)}; partitions {', '.join(str(a.partition) for a in attached)}"
                "): close them first"
            )
        deleted = await asyncio.gather(
            *(self._upstream.delete_subscription(stream.name, a.partition, name) for a in found)
        )
        await self._audit_admin(
            context, principal, "subscription.delete", f"stream {stream.name} subscription {name}"
        )
        return gateway_pb2.DeleteSubscriptionResponse(deleted=any(deleted))

    async def DescribeStreamStats(
        self, request: gateway_pb2.DescribeStreamRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.StreamStats:
        check_name("stream", request.name)
        await self._authorize(context, None, request.name, "DescribeStreamStats")
        stream = await self._stored_stream(request.name)
        answers = await asyncio.gather(
            *(self._upstream.partition_stats(stream.name, p) for p in range(stream.partitions))
        )
        return gateway_pb2.StreamStats(stream=stream.name, partitions=answers)

    async def GetMessages(
        self, request: gateway_pb2.GetMessagesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetMessagesResponse:
        check_name("stream", request.stream)
        await self._authorize(context, Permission.CONSUME, request.stream, "GetMessages")
        stream = await self._stored_stream(request.stream)
        if request.partition >= stream.partitions:
            raise InvalidArgument(
                f"stream {stream.name!r} has partitions 0-{stream.partitions - 1}, "
                f"not {request.partition}"
            )
        count = request.count or 1
        if count > MAX_GET_MESSAGES:
            raise InvalidArgument(f"count must be at most {MAX_GET_MESSAGES}, got {count}")
        if request.subscription:  # peek: the router cuts the batches to exactly them
            name = check_cursor_name(request.subscription)
            return gateway_pb2.GetMessagesResponse(
                batches=await self._upstream.read(
                    stream.name, request.partition, 0, count, subscription=name
                )
            )
        if request.offset < 0:
            raise InvalidArgument(f"offset must be >= 0, got {request.offset}")
        lo, end = request.offset, request.offset + count
        batches = await self._upstream.read(stream.name, request.partition, lo, count)
        exact: list[messages_pb2.StoredBatch] = []
        for batch in batches:
            first, stop = max(lo, batch.base_offset), min(end, batch.base_offset + batch.count)
            if first >= stop:
                continue
            data = batch.arrow_ipc
            if first != batch.base_offset or stop != batch.base_offset + batch.count:
                data = slice_batch(data, first - batch.base_offset, stop - first)
            exact.append(
                messages_pb2.StoredBatch(
                    base_offset=first,
                    count=stop - first,
                    publish_time_us=batch.publish_time_us,
                    arrow_ipc=data,
                )
            )
        return gateway_pb2.GetMessagesResponse(batches=exact)
