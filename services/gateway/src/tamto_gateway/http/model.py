"""Domain values of the HTTP API: messages as published and as delivered, and where a
published message landed. No JSON and no protobuf here (`message_json`, the routes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message to publish. `partition` None: by key, else the request's choice."""

    payload: bytes
    key: bytes | None = None
    headers: dict[str, str] | None = None
    id: str | None = None
    event_time_us: int | None = None
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionBatch:
    """One partition's share of a publish: an encoded Arrow batch of `count` messages."""

    partition: int
    arrow_ipc: bytes
    count: int


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """One delivered message, with what the consumer acks or nacks it by."""

    partition: int
    offset: int
    delivery_count: int
    publish_time_us: int
    payload: bytes
    key: bytes | None
    headers: dict[str, str]
    id: str | None
    event_time_us: int | None
    producer: str | None


@dataclass(frozen=True, slots=True)
class Position:
    """A message named by partition and offset: where a published one is stored, or a
    delivered one acked or nacked."""

    partition: int
    offset: int
