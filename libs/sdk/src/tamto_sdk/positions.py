"""How a subscription is set up: where it starts reading and how its consumers share it."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from tamto_protocol.v1 import messages_pb2
from tamto_sdk.messages import datetime_to_us

__all__ = ["Start", "StartPosition", "SubscriptionType"]


class SubscriptionType(enum.Enum):
    """How the consumers of one subscription share its messages (DESIGN §4).

    Attributes:
        EXCLUSIVE: one consumer; the server refuses a second one.
        FAILOVER: one active consumer; the next one (in `consumer_name` order)
            takes over when it leaves.
        SHARED: messages are load-balanced across consumers, with no ordering.
        KEY_SHARED: the same key always goes to one consumer, in order; joining
            or leaving moves as few keys as possible.
        MULTICAST: every consumer sees every message, each with its own acks;
            needs a `consumer_name`, which names that consumer's own cursor.
    """

    EXCLUSIVE = "exclusive"
    FAILOVER = "failover"
    SHARED = "shared"
    KEY_SHARED = "key_shared"
    MULTICAST = "multicast"

    def _to_proto(self) -> Any:
        return _TYPE_TO_PROTO[self]


_TYPE_TO_PROTO = {
    SubscriptionType.EXCLUSIVE: messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE,
    SubscriptionType.FAILOVER: messages_pb2.SUBSCRIPTION_TYPE_FAILOVER,
    SubscriptionType.SHARED: messages_pb2.SUBSCRIPTION_TYPE_SHARED,
    SubscriptionType.KEY_SHARED: messages_pb2.SUBSCRIPTION_TYPE_KEY_SHARED,
    SubscriptionType.MULTICAST: messages_pb2.SUBSCRIPTION_TYPE_MULTICAST,
}


@dataclass(frozen=True, slots=True)
class StartPosition:
    """A start position; build one with `Start.earliest()`, `Start.latest()`,
    `Start.offset(n)` or `Start.time(moment)`. It applies only when the
    subscription is created.

    Attributes:
        kind: which kind of position this is.
        offset: the offset, for ``kind == "offset"``.
        time_us: microseconds since the Unix epoch, for ``kind == "time"``.
    """

    kind: Literal["earliest", "latest", "offset", "time"]
    offset: int | None = None
    time_us: int | None = None

    def _to_proto(self) -> Any:
        if self.kind == "earliest":
            return messages_pb2.StartPosition(earliest=True)
        if self.kind == "latest":
            return messages_pb2.StartPosition(latest=True)
        if self.kind == "time":
            return messages_pb2.StartPosition(time_us=self.time_us)
        return messages_pb2.StartPosition(offset=self.offset)


class Start:
    """Factories for `StartPosition`."""

    @staticmethod
    def earliest() -> StartPosition:
        """From the oldest retained message."""
        return StartPosition("earliest")

    @staticmethod
    def latest() -> StartPosition:
        """Only messages published after the subscription is created."""
        return StartPosition("latest")

    @staticmethod
    def offset(n: int) -> StartPosition:
        """From offset `n` of every partition."""
        if n < 0:
            raise ValueError("offset must not be negative")
        return StartPosition("offset", n)

    @staticmethod
    def time(moment: datetime) -> StartPosition:
        """From the first message of each partition published at or after `moment`.

        `moment` must be timezone-aware (a naive datetime raises `ValueError`);
        it is sent with microsecond precision.
        """
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise ValueError("Start.time needs a timezone-aware datetime")
        return StartPosition("time", time_us=datetime_to_us(moment))
