"""The router's domain values: what its modules pass each other, free of protobuf.

The storage adapter (`storage_client`) converts storage's wire types into these
at its edge, as storage's own `model.py` does for its service.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class Batch:
    """A sequenced batch: the producer's Arrow bytes and what the router assigned."""

    base_offset: int
    count: int
    publish_time_us: int
    arrow_ipc: bytes

    @property
    def end(self) -> int:
        """One past the last offset."""
        return self.base_offset + self.count


@dataclass(frozen=True, slots=True)
class ProducerOrder:
    """Where an idempotent producer's batch stands among its batches to one partition
    (`tamto_router.producer_turns`): the producer (the prefix of its generated ids),
    the highest sequence number generated for the batch, and, when the producer's
    previous batch was unanswered as this one was sent, that batch's highest."""

    producer: str
    last_sequence: int
    after_sequence: int | None


@dataclass(frozen=True, slots=True)
class LogBounds:
    """A partition's readable range as storage reported it: [start_offset, next_offset)."""

    start_offset: int
    next_offset: int


class SubscriptionType(Enum):
    """How a subscription shares its messages among its consumers (`strategies`)."""

    EXCLUSIVE = "exclusive"
    FAILOVER = "failover"
    SHARED = "shared"
    KEY_SHARED = "key_shared"
    # Each consumer (by name) has a subscription of its own, with its own cursor:
    # inside the router that subscription behaves as an exclusive one.
    MULTICAST = "multicast"


@dataclass(frozen=True, slots=True)
class Delivery:
    """Messages handed to one consumer: a whole or sliced batch, and its delivery count."""

    partition: int
    batch: Batch
    delivery_count: int
    #: Key-shared deliveries are sparse: each message's offset. None: contiguous.
    offsets: tuple[int, ...] | None = None


# -- subscription administration and stream stats (`tamto_router.admin`) --------


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """A partition's stored range and its bytes on disk, as storage reports them."""

    bounds: LogBounds
    wal_bytes: int
    segment_bytes: int


@dataclass(frozen=True, slots=True)
class Seek:
    """Where to move a subscription's cursor: `kind` is earliest, latest, offset
    (`value` the offset), time (`value` µs since the epoch), skip (`value` messages)
    or shift (`value` offsets from the ack floor, back when negative)."""

    kind: str
    value: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerState:
    """A consumer attached to a subscription: its credit and what it holds unacked."""

    name: str
    credits: int
    unacked: int
    address: str = ""


@dataclass(frozen=True, slots=True)
class SubscriptionState:
    """One partition of a subscription, as `SubscriptionAdmin.describe` finds it."""

    partition: int
    exists: bool
    start_offset: int = 0
    ack_floor: int = 0
    position: int = 0
    end_offset: int = 0
    backlog_messages: int = 0
    backlog_bytes: int = 0
    unacked: int = 0
    oldest_unacked_publish_time_us: int = 0
    redeliveries: int = 0
    dead_lettered: int = 0
    #: The subscription type's value ("shared", ...), None with no consumer attached.
    type: str | None = None
    consumers: tuple[ConsumerState, ...] = ()
    #: A seek's dry run: the ack floor the seek would set.
    seek_to: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's stored range, size on disk, recent publish rate and owner."""

    partition: int
    start_offset: int
    end_offset: int
    wal_bytes: int
    segment_bytes: int
    publish_rate: float
    owner: str
