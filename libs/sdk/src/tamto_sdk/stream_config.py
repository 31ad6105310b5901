"""Public value types of streams: kinds, durability, retention, a stream's config, its
info and what ensuring it did; and their conversion from and to protobuf. Protobuf types
never leave this module's functions.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from tamto_protocol.v1 import messages_pb2
from tamto_sdk.errors import InvalidArgument

__all__ = [
    "Durability",
    "EnsureResult",
    "EphemeralConfig",
    "Overflow",
    "RetentionPolicy",
    "StreamConfig",
    "StreamInfo",
    "StreamKind",
    "kind_to_proto",
]


class StreamKind(enum.Enum):
    """What kind of stream a stream is (DESIGN §3)."""

    UNSPECIFIED = "unspecified"
    PERSISTENT = "persistent"
    EPHEMERAL = "ephemeral"
    """At-most-once, never stored, topic-routed (docs/ephemeral.md)."""


_KIND_FROM_PROTO = {
    messages_pb2.STREAM_KIND_UNSPECIFIED: StreamKind.UNSPECIFIED,
    messages_pb2.STREAM_KIND_PERSISTENT: StreamKind.PERSISTENT,
    messages_pb2.STREAM_KIND_EPHEMERAL: StreamKind.EPHEMERAL,
}
_KIND_TO_PROTO = {kind: value for value, kind in _KIND_FROM_PROTO.items()}


def kind_to_proto(kind: StreamKind) -> Any:
    """The protobuf enum value for `kind`."""
    return _KIND_TO_PROTO[kind]


class Durability(enum.Enum):
    """How storage makes an append durable before it is acknowledged."""

    GROUP_COMMIT = "group"
    """One fsync per group of concurrent appends (the default)."""
    INTERVAL = "interval"
    """At most one fsync every `fsync_interval_ms`; acks still wait for it."""


_DURABILITY_FROM_PROTO = {
    messages_pb2.DURABILITY_UNSPECIFIED: Durability.GROUP_COMMIT,
    messages_pb2.DURABILITY_GROUP_COMMIT: Durability.GROUP_COMMIT,
    messages_pb2.DURABILITY_INTERVAL: Durability.INTERVAL,
}
_DURABILITY_TO_PROTO = {
    Durability.GROUP_COMMIT: messages_pb2.DURABILITY_GROUP_COMMIT,
    Durability.INTERVAL: messages_pb2.DURABILITY_INTERVAL,
}


class RetentionPolicy(enum.Enum):
    """What, besides `retention_ms` / `retention_bytes`, removes a stream's messages."""

    LIMITS = "limits"
    """Only the limits (the default)."""
    INTEREST = "interest"
    """Also a message every subscription on its partition has acked. A partition
    that no subscription has reached yet keeps everything; the limits still apply."""


_RETENTION_FROM_PROTO = {
    messages_pb2.RETENTION_POLICY_UNSPECIFIED: RetentionPolicy.LIMITS,
    messages_pb2.RETENTION_POLICY_LIMITS: RetentionPolicy.LIMITS,
    messages_pb2.RETENTION_POLICY_INTEREST: RetentionPolicy.INTEREST,
}
_RETENTION_TO_PROTO = {
    RetentionPolicy.LIMITS: messages_pb2.RETENTION_POLICY_LIMITS,
    RetentionPolicy.INTEREST: messages_pb2.RETENTION_POLICY_INTEREST,
}
_UINT32 = 2**32 - 1
_UINT64 = 2**64 - 1


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """A persistent stream's settings (besides its partition count).

    The server checks every value and refuses one out of range with
    `InvalidArgument` naming the field and the allowed range (see docs/operations.md's
    stream configuration table). A numeric 0 means the server's default.

    Attributes:
        retention_ms: keep messages at least this long; 0 keeps them forever.
        retention_bytes: per partition; 0 is unbounded.
        retention_policy: `RetentionPolicy.LIMITS` (default) or
            `RetentionPolicy.INTEREST` (also drop what every subscription acked).
        dedup_window_ms: how long a message id is remembered (default 2 minutes).
        ack_timeout_ms: a delivered message unacked this long is redelivered
            (default 30 s).
        max_deliveries: deliveries before a message goes to the dead-letter
            stream; 0 never.
        max_lag: an unacked message this many offsets behind the newest delivered
            one goes to the dead-letter stream; 0 never.
        dead_letter_stream: where dead letters go; "" means ``"<stream>.dlq"``
            (a described stream shows the effective name).
        durability: group commit (default) or interval.
        fsync_interval_ms: the interval with `Durability.INTERVAL` (0: the
            server's default); must stay 0 with group commit.
        replication_factor: R, storage nodes holding every message (0: the
            server's default at creation, min(3, storage nodes)); more than the
            live storage nodes is refused.
        ack_quorum: Q, replicas that must have a message fsynced before it is
            acknowledged (0: a majority of R); 1 <= Q <= R.
    """

    retention_ms: int = 0
    retention_bytes: int = 0
    retention_policy: RetentionPolicy = RetentionPolicy.LIMITS
    dedup_window_ms: int = 2 * 60 * 1000
    ack_timeout_ms: int = 30 * 1000
    max_deliveries: int = 0
    max_lag: int = 0
    dead_letter_stream: str = ""
    durability: Durability = Durability.GROUP_COMMIT
    fsync_interval_ms: int = 0
    replication_factor: int = 0
    ack_quorum: int = 0

    def _to_proto(self, kind: StreamKind, partitions: int) -> Any:
        limits = {
            "partitions": (1, _UINT32),
            "retention_ms": (0, _UINT64),
            "retention_bytes": (0, _UINT64),
            "dedup_window_ms": (0, _UINT64),
            "ack_timeout_ms": (0, _UINT64),
            "max_deliveries": (0, _UINT32),
            "max_lag": (0, _UINT64),
            "fsync_interval_ms": (0, _UINT32),
            "replication_factor": (0, _UINT32),
            "ack_quorum": (0, _UINT32),
        }
        values = {"partitions": partitions} | {
            name: getattr(self, name) for name in limits if name != "partitions"
        }
        for name, (low, high) in limits.items():
            value = values[name]
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgument(f"{name} must be an integer, got {value!r}")
            if not low <= value <= high:
                raise InvalidArgument(f"{name} must be between {low} and {high}, got {value}")
        if not isinstance(self.durability, Durability):
            raise InvalidArgument(
                f"durability must be a tamto_sdk.stream_config.Durability, got {self.durability!r}"
            )
        if not isinstance(self.retention_policy, RetentionPolicy):
            raise InvalidArgument(
                f"retention_policy must be a tamto_sdk.stream_config.RetentionPolicy, "
                f"got {self.retention_policy!r}"
            )
        return messages_pb2.StreamConfig(
            kind=kind_to_proto(kind),
            durability=_DURABILITY_TO_PROTO[self.durability],
            retention_policy=_RETENTION_TO_PROTO[self.retention_policy],
            dead_letter_stream=self.dead_letter_stream,
            **values,
        )

    @classmethod
    def _from_proto(cls, config: Any) -> StreamConfig:
        return cls(
            retention_ms=int(config.retention_ms),
            retention_bytes=int(config.retention_bytes),
            retention_policy=_RETENTION_FROM_PROTO.get(
                config.retention_policy, RetentionPolicy.LIMITS
            ),
            dedup_window_ms=int(config.dedup_window_ms),
            ack_timeout_ms=int(config.ack_timeout_ms),
            max_deliveries=int(config.max_deliveries),
            max_lag=int(config.max_lag),
            dead_letter_stream=str(config.dead_letter_stream),
            durability=_DURABILITY_FROM_PROTO.get(config.durability, Durability.GROUP_COMMIT),
            fsync_interval_ms=int(config.fsync_interval_ms),
            replication_factor=int(config.replication_factor),
            ack_quorum=int(config.ack_quorum),
        )


class Overflow(enum.Enum):
    """What an ephemeral consumer's full buffer drops (whole batches, counted in messages)."""

    DROP_OLDEST = "drop_oldest"
    """The oldest buffered messages make room (the default)."""
    DROP_NEWEST = "drop_newest"
    """New messages are dropped while the buffer is full."""


_OVERFLOW_FROM_PROTO = {
    messages_pb2.OVERFLOW_UNSPECIFIED: Overflow.DROP_OLDEST,
    messages_pb2.OVERFLOW_DROP_OLDEST: Overflow.DROP_OLDEST,
    messages_pb2.OVERFLOW_DROP_NEWEST: Overflow.DROP_NEWEST,
}
_OVERFLOW_TO_PROTO = {
    Overflow.DROP_OLDEST: messages_pb2.OVERFLOW_DROP_OLDEST,
    Overflow.DROP_NEWEST: messages_pb2.OVERFLOW_DROP_NEWEST,
}


@dataclass(frozen=True, slots=True)
class EphemeralConfig:
    """An ephemeral stream's settings (docs/ephemeral.md); 0 means the server's default.

    Attributes:
        buffer_messages: messages held per consumer for a slow one (default 10,000;
            1 to 1,000,000).
        overflow: what a full buffer drops.
        request_timeout_ms: how long a request waits for its reply unless it says
            (default 30,000; 1 to 600,000).
    """

    buffer_messages: int = 0
    overflow: Overflow = Overflow.DROP_OLDEST
    request_timeout_ms: int = 0

    def _to_proto(self) -> Any:
        for name, high in (("buffer_messages", _UINT32), ("request_timeout_ms", _UINT64)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
                raise InvalidArgument(
                    f"{name} must be an integer between 0 and {high}, got {value!r}"
                )
        if not isinstance(self.overflow, Overflow):
            raise InvalidArgument(
                f"overflow must be a tamto_sdk.stream_config.Overflow, got {self.overflow!r}"
            )
        return messages_pb2.StreamConfig(
            kind=messages_pb2.STREAM_KIND_EPHEMERAL,
            buffer_messages=self.buffer_messages,
            overflow=_OVERFLOW_TO_PROTO[self.overflow],
            request_timeout_ms=self.request_timeout_ms,
        )

    @classmethod
    def _from_proto(cls, config: Any) -> EphemeralConfig:
        return cls(
            buffer_messages=int(config.buffer_messages),
            overflow=_OVERFLOW_FROM_PROTO.get(config.overflow, Overflow.DROP_OLDEST),
            request_timeout_ms=int(config.request_timeout_ms),
        )


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream's definition as the server stores it (`ephemeral` is set for an
    ephemeral stream; `config` then holds only defaults)."""

    name: str
    partitions: int
    kind: StreamKind = StreamKind.PERSISTENT
    config: StreamConfig = StreamConfig()
    ephemeral: EphemeralConfig | None = None

    @classmethod
    def _from_proto(cls, info: Any) -> StreamInfo:
        kind = _KIND_FROM_PROTO.get(info.config.kind, StreamKind.UNSPECIFIED)
        if kind is StreamKind.EPHEMERAL:
            return cls(
                name=info.name,
                partitions=int(info.config.partitions),
                kind=kind,
                ephemeral=EphemeralConfig._from_proto(info.config),
            )
        return cls(
            name=info.name,
            partitions=int(info.config.partitions),
            kind=kind,
            config=StreamConfig._from_proto(info.config),
        )


@dataclass(frozen=True, slots=True)
class EnsureResult:
    """The outcome of `Streams.ensure`.

    Attributes:
        stream: the stream as stored after the call.
        created: whether the call created it.
        differences: how the requested config differs from the stored one, one
            line per setting (``"<field>: stored <x>, requested <y>"``); empty when
            they match. Without `overwrite` the stored config was kept; with it,
            these are the changes that were applied.
    """

    stream: StreamInfo
    created: bool
    differences: list[str] = field(default_factory=list)
