"""Conversion between `tamto.v1.StreamConfig`/`StreamInfo` and `StreamDef`: the one place.

On the wire, zero means "the default" for every numeric field (and an empty
dead-letter stream means `<name>.dlq`); in a `StreamDef` every value is explicit.
"""

from __future__ import annotations

from typing import Any

from tamto_common.errors import InvalidArgument
from tamto_common.streams import (
    DEFAULT_ACK_TIMEOUT_MS,
    DEFAULT_BUFFER_MESSAGES,
    DEFAULT_DEDUP_WINDOW_MS,
    DEFAULT_REQUEST_TIMEOUT_MS,
    Durability,
    Overflow,
    RetentionPolicy,
    StreamDef,
)
from tamto_protocol.v1 import messages_pb2

_DURABILITY_FROM_PROTO: dict[int, Durability] = {
    messages_pb2.DURABILITY_UNSPECIFIED: "group",
    messages_pb2.DURABILITY_GROUP_COMMIT: "group",
    messages_pb2.DURABILITY_INTERVAL: "interval",
}
_DURABILITY_TO_PROTO: dict[str, Any] = {
    "group": messages_pb2.DURABILITY_GROUP_COMMIT,
    "interval": messages_pb2.DURABILITY_INTERVAL,
}
_RETENTION_FROM_PROTO: dict[int, RetentionPolicy] = {
    messages_pb2.RETENTION_POLICY_UNSPECIFIED: "limits",
    messages_pb2.RETENTION_POLICY_LIMITS: "limits",
    messages_pb2.RETENTION_POLICY_INTEREST: "interest",
}
_RETENTION_TO_PROTO: dict[str, Any] = {
    "limits": messages_pb2.RETENTION_POLICY_LIMITS,
    "interest": messages_pb2.RETENTION_POLICY_INTEREST,
}
_KINDS = (messages_pb2.STREAM_KIND_UNSPECIFIED, messages_pb2.STREAM_KIND_PERSISTENT)
_OVERFLOW_FROM_PROTO: dict[int, Overflow] = {
    messages_pb2.OVERFLOW_UNSPECIFIED: "drop_oldest",
    messages_pb2.OVERFLOW_DROP_OLDEST: "drop_oldest",
    messages_pb2.OVERFLOW_DROP_NEWEST: "drop_newest",
}
_OVERFLOW_TO_PROTO: dict[str, Any] = {
    "drop_oldest": messages_pb2.OVERFLOW_DROP_OLDEST,
    "drop_newest": messages_pb2.OVERFLOW_DROP_NEWEST,
}
#: Settings of persistent streams only; an ephemeral stream's request must leave them 0.
_PERSISTENT_ONLY = (
    "retention_ms",
    "retention_bytes",
    "retention_policy",
    "dedup_window_ms",
    "ack_timeout_ms",
    "max_deliveries",
    "max_lag",
    "dead_letter_stream",
    "durability",
    "fsync_interval_ms",
    "replication_factor",
    "ack_quorum",
)
_EPHEMERAL_ONLY = ("buffer_messages", "overflow", "request_timeout_ms")


def stream_def(name: str, config: messages_pb2.StreamConfig) -> StreamDef:
    """The definition a request asks for; zeros become defaults. Not validated yet."""
    if config.kind == messages_pb2.STREAM_KIND_EPHEMERAL:
        return _ephemeral_def(name, config)
    if config.kind not in _KINDS:
        raise InvalidArgument(
            f"kind must be STREAM_KIND_PERSISTENT or STREAM_KIND_EPHEMERAL, got {config.kind}"
        )
    for field in _EPHEMERAL_ONLY:
        if getattr(config, field):
            raise InvalidArgument(f"{field} applies only to ephemeral streams")
    durability = _DURABILITY_FROM_PROTO.get(config.durability)
    if durability is None:
        raise InvalidArgument(
            "durability must be DURABILITY_GROUP_COMMIT or DURABILITY_INTERVAL, "
            f"got {config.durability}"
        )
    retention_policy = _RETENTION_FROM_PROTO.get(config.retention_policy)
    if retention_policy is None:
        raise InvalidArgument(
            "retention_policy must be RETENTION_POLICY_LIMITS or RETENTION_POLICY_INTEREST, "
            f"got {config.retention_policy}"
        )
    return StreamDef(
        name=name,
        partitions=config.partitions or 1,
        retention_ms=config.retention_ms,
        retention_bytes=config.retention_bytes,
        retention_policy=retention_policy,
        dedup_window_ms=config.dedup_window_ms or DEFAULT_DEDUP_WINDOW_MS,
        ack_timeout_ms=config.ack_timeout_ms or DEFAULT_ACK_TIMEOUT_MS,
        max_deliveries=config.max_deliveries,
        max_lag=config.max_lag,
        dead_letter_stream=config.dead_letter_stream,
        durability=durability,
        fsync_interval_ms=config.fsync_interval_ms,
        # 0: the default, chosen at creation (`StreamDef.with_replication_defaults`).
        replication_factor=config.replication_factor,
        ack_quorum=config.ack_quorum,
    )


def _ephemeral_def(name: str, config: messages_pb2.StreamConfig) -> StreamDef:
    for field in _PERSISTENT_ONLY:
        if getattr(config, field):
            raise InvalidArgument(f"{field} applies only to persistent streams")
    overflow = _OVERFLOW_FROM_PROTO.get(config.overflow)
    if overflow is None:
        raise InvalidArgument(
            f"overflow must be OVERFLOW_DROP_OLDEST or OVERFLOW_DROP_NEWEST, got {config.overflow}"
        )
    return StreamDef(
        name=name,
        partitions=config.partitions or 1,
        kind="ephemeral",
        buffer_messages=config.buffer_messages or DEFAULT_BUFFER_MESSAGES,
        overflow=overflow,
        request_timeout_ms=config.request_timeout_ms or DEFAULT_REQUEST_TIMEOUT_MS,
    )


def stream_info(stream: StreamDef) -> messages_pb2.StreamInfo:
    """A stored definition as the API shows it (every value explicit, the dead-letter
    stream resolved; an ephemeral stream shows only its own settings)."""
    if stream.ephemeral:
        return messages_pb2.StreamInfo(
            name=stream.name,
            config=messages_pb2.StreamConfig(
                kind=messages_pb2.STREAM_KIND_EPHEMERAL,
                partitions=1,
                buffer_messages=stream.buffer_messages,
                overflow=_OVERFLOW_TO_PROTO[stream.overflow],
                request_timeout_ms=stream.request_timeout_ms,
            ),
        )
    return messages_pb2.StreamInfo(
        name=stream.name,
        config=messages_pb2.StreamConfig(
            kind=messages_pb2.STREAM_KIND_PERSISTENT,
            partitions=stream.partitions,
            retention_ms=stream.retention_ms,
            retention_bytes=stream.retention_bytes,
            retention_policy=_RETENTION_TO_PROTO[stream.retention_policy],
            dedup_window_ms=stream.dedup_window_ms,
            ack_timeout_ms=stream.ack_timeout_ms,
            max_deliveries=stream.max_deliveries,
            max_lag=stream.max_lag,
            dead_letter_stream=stream.dead_letter,
            durability=_DURABILITY_TO_PROTO[stream.durability],
            fsync_interval_ms=stream.fsync_interval_ms,
            replication_factor=stream.replication_factor,
            ack_quorum=stream.ack_quorum,
        ),
    )
