"""What `client.subscriptions` answers: a subscription's cursors and backlog per
partition, its consumers, a stream's stats, and one row summing them up.

Plain values built from the gateway's replies (`_from_proto`); the calls that
fetch them are `tamto_sdk.subscriptions`, which is also where applications import
them from (its `__all__` lists them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tamto_protocol.v1 import messages_pb2
from tamto_sdk.messages import us_to_datetime
from tamto_sdk.overview import SubscriptionSummary
from tamto_sdk.positions import SubscriptionType

_TYPE_FROM_PROTO = {
    messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE: SubscriptionType.EXCLUSIVE,
    messages_pb2.SUBSCRIPTION_TYPE_FAILOVER: SubscriptionType.FAILOVER,
    messages_pb2.SUBSCRIPTION_TYPE_SHARED: SubscriptionType.SHARED,
    messages_pb2.SUBSCRIPTION_TYPE_KEY_SHARED: SubscriptionType.KEY_SHARED,
    messages_pb2.SUBSCRIPTION_TYPE_MULTICAST: SubscriptionType.MULTICAST,
}


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """A consumer attached to a subscription on one partition.

    Attributes:
        name: its `consumer_name` ("" if it gave none).
        address: the client's address ("" when the server does not know it).
        credits: messages it will still take (negative: overdrawn by one batch).
        unacked: messages delivered to it and not acked yet.
    """

    name: str
    address: str
    credits: int
    unacked: int


@dataclass(frozen=True, slots=True)
class SubscriptionPartitionInfo:
    """One partition of a subscription.

    Attributes:
        partition: the partition.
        start_offset: the oldest offset stored.
        ack_floor: every offset below it is acked (the committed cursor).
        position: the next offset never delivered (`ack_floor` when no consumer
            has loaded the subscription since its router took the partition).
        end_offset: the offset the next published message gets.
        backlog_messages: messages not acked from `ack_floor` to `end_offset`.
        backlog_bytes: an estimate: `backlog_messages` times the partition's
            average stored message size.
        unacked: delivered and not acked (in flight).
        oldest_unacked_publish_time: when the oldest message not acked was
            published (None: nothing waits).
        oldest_unacked_age_s: how old that message was when this was described.
        redeliveries: messages delivered again since the router started.
        dead_lettered: messages moved to the dead-letter stream since the router
            loaded the subscription.
        type: the subscription type, None while no consumer is attached.
        consumers: the consumers attached.
        seek_to: a seek's dry run: the ack floor the seek would set (None otherwise).
    """

    partition: int
    start_offset: int
    ack_floor: int
    position: int
    end_offset: int
    backlog_messages: int
    backlog_bytes: int
    unacked: int
    oldest_unacked_publish_time: datetime | None
    oldest_unacked_age_s: float | None
    redeliveries: int
    dead_lettered: int
    type: SubscriptionType | None
    consumers: tuple[ConsumerInfo, ...]
    seek_to: int | None = None

    @classmethod
    def _from_proto(cls, p: Any, now_us: int) -> SubscriptionPartitionInfo:
        oldest = int(p.oldest_unacked_publish_time_us)
        return cls(
            partition=int(p.partition),
            start_offset=int(p.start_offset),
            ack_floor=int(p.ack_floor),
            position=int(p.position),
            end_offset=int(p.end_offset),
            backlog_messages=int(p.backlog_messages),
            backlog_bytes=int(p.backlog_bytes),
            unacked=int(p.unacked),
            oldest_unacked_publish_time=us_to_datetime(oldest) if oldest else None,
            oldest_unacked_age_s=max(0.0, (now_us - oldest) / 1e6) if oldest else None,
            redeliveries=int(p.redeliveries),
            dead_lettered=int(p.dead_lettered),
            type=_TYPE_FROM_PROTO.get(p.type),
            consumers=tuple(
                ConsumerInfo(c.name, c.address, int(c.credits), int(c.unacked)) for c in p.consumers
            ),
            seek_to=int(p.seek_to) if p.HasField("seek_to") else None,
        )


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """A subscription on a stream: its partitions (those it has a cursor on) and totals."""

    stream: str
    subscription: str
    partitions: tuple[SubscriptionPartitionInfo, ...]

    @property
    def backlog_messages(self) -> int:
        return sum(p.backlog_messages for p in self.partitions)

    @property
    def backlog_bytes(self) -> int:
        return sum(p.backlog_bytes for p in self.partitions)

    @property
    def unacked(self) -> int:
        return sum(p.unacked for p in self.partitions)

    @property
    def dead_lettered(self) -> int:
        return sum(p.dead_lettered for p in self.partitions)

    @property
    def consumers(self) -> tuple[str, ...]:
        """The attached consumers' names, each once ("" for one without a name)."""
        return tuple(dict.fromkeys(c.name for p in self.partitions for c in p.consumers))

    @property
    def type(self) -> SubscriptionType | None:
        """The type of the first partition with consumers attached (None: none are)."""
        return next((p.type for p in self.partitions if p.type is not None), None)

    @property
    def oldest_unacked_age_s(self) -> float | None:
        ages = [p.oldest_unacked_age_s for p in self.partitions if p.oldest_unacked_age_s]
        return max(ages) if ages else None

    @classmethod
    def _from_proto(cls, info: Any) -> SubscriptionInfo:
        now_us = time.time_ns() // 1000
        return cls(
            stream=info.stream,
            subscription=info.subscription,
            partitions=tuple(
                SubscriptionPartitionInfo._from_proto(p, now_us) for p in info.partitions
            ),
        )


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """A stream partition's stored range, size on disk, publish rate and owner.

    Attributes:
        partition: the partition.
        start_offset: the oldest offset stored.
        end_offset: the offset the next message gets.
        messages: messages stored (`end_offset - start_offset`).
        wal_bytes, segment_bytes: bytes on disk of the write-ahead log and of
            sealed segments.
        publish_rate: messages per second published over the last minute.
        owner: the router instance that owns the partition.
    """

    partition: int
    start_offset: int
    end_offset: int
    messages: int
    wal_bytes: int
    segment_bytes: int
    publish_rate: float
    owner: str

    @property
    def bytes_on_disk(self) -> int:
        return self.wal_bytes + self.segment_bytes


@dataclass(frozen=True, slots=True)
class StreamStats:
    """Every partition's `PartitionStats`, and totals."""

    stream: str
    partitions: tuple[PartitionStats, ...]

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    @property
    def bytes_on_disk(self) -> int:
        return sum(p.bytes_on_disk for p in self.partitions)

    @property
    def publish_rate(self) -> float:
        return sum(p.publish_rate for p in self.partitions)


def summarize(info: SubscriptionInfo, stats: StreamStats) -> SubscriptionSummary:
    """`info` in one row; the publish rate is that of the partitions it has a cursor on."""
    mine = {p.partition for p in info.partitions}
    return SubscriptionSummary(
        stream=info.stream,
        subscription=info.subscription,
        partitions=len(info.partitions),
        backlog_messages=info.backlog_messages,
        unacked=info.unacked,
        publish_rate=sum(p.publish_rate for p in stats.partitions if p.partition in mine),
        consumers=info.consumers,
        oldest_unacked_age_s=info.oldest_unacked_age_s,
        dead_lettered=info.dead_lettered,
        type=info.type,
    )
