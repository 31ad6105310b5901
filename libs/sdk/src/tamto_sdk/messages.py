"""Public value types (streams, publish results, messages, batches) and their
conversion from protobuf. Protobuf types never leave this module's functions.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from tamto_protocol.v1 import messages_pb2
from tamto_sdk.errors import InvalidArgument

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "Durability",
    "EnsureResult",
    "Message",
    "MessageBatch",
    "PublishResult",
    "PublishedBatch",
    "RetentionPolicy",
    "StreamConfig",
    "StreamInfo",
    "StreamKind",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def us_to_datetime(us: int) -> datetime:
    """Microseconds since the Unix epoch to an aware UTC datetime (exact)."""
    return _EPOCH + timedelta(microseconds=us)


def publish_time_of(us: int) -> datetime:
    """A stored batch's `publish_time_us` as a datetime; `BatchFormatError` (the
    batch is undecodable) for one no datetime holds."""
    try:
        return us_to_datetime(us)
    except OverflowError:
        from tamto_protocol.batch import BatchFormatError  # pyarrow: only for messages

        raise BatchFormatError(f"publish_time_us {us} lies outside years 1 to 9999") from None


def datetime_to_us(moment: datetime) -> int:
    """An aware datetime to microseconds since the Unix epoch (naive means UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


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
                f"durability must be a tamto_sdk.Durability, got {self.durability!r}"
            )
        if not isinstance(self.retention_policy, RetentionPolicy):
            raise InvalidArgument(
                f"retention_policy must be a tamto_sdk.RetentionPolicy, "
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
            raise InvalidArgument(f"overflow must be a tamto_sdk.Overflow, got {self.overflow!r}")
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


@dataclass(frozen=True, slots=True)
class PublishResult:
    """Where a published message was durably stored."""

    stream: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PublishedBatch:
    """Where the messages of one `Producer.send_batch` call were durably stored.

    Attributes:
        stream: the stream.
        partitions: each message's partition (int32), in the order they were given.
        offsets: each message's offset (int64), in the order they were given.
    """

    stream: str
    partitions: pa.Array
    offsets: pa.Array

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, index: int) -> PublishResult:
        """Message ``index``'s `PublishResult`."""
        return PublishResult(
            self.stream, self.partitions[index].as_py(), self.offsets[index].as_py()
        )


class Message:
    """One delivered message.

    Attributes:
        stream, partition, offset: where it is stored.
        payload: the message body.
        key: the routing key, if the producer set one.
        headers: string headers (trace context travels here).
        id: the producer-supplied dedup id, if any.
        event_time: the producer-supplied event time, if any (aware, UTC).
        publish_time: when the server sequenced it (aware, UTC).
        delivery_count: how many times it has been delivered, this delivery
            included (1: the first time; more after a nack, an ack timeout or a
            reconnect).

    Immutable. A delivered message is a view of one row of its batch: it holds the
    batch's shared `_Rows`, its index and its offset, and each field is read from
    the batch's Arrow columns when first asked for (a column is converted to
    Python values once for the whole batch), so iterating costs one small object
    per message and fields nobody reads are never built. So a message kept after
    its batch is done keeps that batch's buffers alive: keep `payload` (a `bytes`)
    rather than the message to hold only what you need. A `Message` built
    directly from its fields holds just those; `dataclasses.replace`, `fields` and
    `asdict` work on both as on the dataclass it used to be.
    """

    __slots__ = ("_index", "_offset", "_rows")
    __match_args__ = (
        "stream",
        "partition",
        "offset",
        "payload",
        "key",
        "headers",
        "id",
        "event_time",
        "publish_time",
        "delivery_count",
    )
    _rows: _Rows
    _index: int
    _offset: int
    # Set below from `_MessageFields`: `dataclasses.fields`, `replace` and `asdict`
    # work on a Message as they did when it was a dataclass.
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def __init__(
        self,
        stream: str,
        partition: int,
        offset: int,
        payload: bytes,
        key: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        id: str | None = None,
        event_time: datetime | None = None,
        publish_time: datetime = _EPOCH,
        delivery_count: int = 1,
    ) -> None:
        self._rows = _Rows.single(
            stream,
            partition,
            payload,
            key,
            {} if headers is None else headers,
            id,
            event_time,
            publish_time,
            delivery_count,
        )
        self._index = 0
        self._offset = offset

    @property
    def stream(self) -> str:
        return self._rows.stream

    @property
    def partition(self) -> int:
        return self._rows.partition

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def payload(self) -> bytes:
        return self._rows.payloads[self._index]

    @property
    def key(self) -> bytes | None:
        return self._rows.keys[self._index]

    @property
    def headers(self) -> Mapping[str, str]:
        return self._rows.header(self._index)

    @property
    def id(self) -> str | None:
        return self._rows.ids[self._index]

    @property
    def event_time(self) -> datetime | None:
        return self._rows.event_times[self._index]

    @property
    def publish_time(self) -> datetime:
        return self._rows.publish_time

    @property
    def delivery_count(self) -> int:
        return self._rows.delivery_count

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__match_args__)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self._fields() == other._fields()

    #: Unhashable, as before: equality covers `headers`, a dict.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"Message({inner})"


@dataclass(frozen=True)
class _MessageFields:
    """`Message`'s fields as a dataclass declares them (see `Message.__dataclass_fields__`)."""

    stream: str
    partition: int
    offset: int
    payload: bytes
    key: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    id: str | None = None
    event_time: datetime | None = None
    publish_time: datetime = _EPOCH
    delivery_count: int = 1


Message.__dataclass_fields__ = _MessageFields.__dataclass_fields__
Message.__dataclass_params__ = _MessageFields.__dataclass_params__  # type: ignore[attr-defined]


def _delivered(rows: _Rows, index: int, offset: int) -> Message:
    """Message `index` of the batch behind `rows` (no copying: fields stay in the batch)."""
    message = _new_message(Message)
    message._rows = rows
    message._index = index
    message._offset = offset
    return message


_new_message = object.__new__


class _Rows:
    """The Python values of one batch's columns, each column converted on first use
    (`to_pylist` once for the whole batch), shared by the batch's `Message` views."""

    def __init__(
        self,
        stream: str,
        partition: int,
        publish_time: datetime,
        delivery_count: int,
        record_batch: pa.RecordBatch | None,
    ) -> None:
        self.stream = stream
        self.partition = partition
        self.publish_time = publish_time
        self.delivery_count = delivery_count
        self._record_batch = record_batch
        self._headers: list[Mapping[str, str] | None] | None = None

    @classmethod
    def single(
        cls,
        stream: str,
        partition: int,
        payload: bytes,
        key: bytes | None,
        headers: Mapping[str, str],
        id: str | None,
        event_time: datetime | None,
        publish_time: datetime,
        delivery_count: int,
    ) -> _Rows:
        """The values of one message given field by field (`Message`'s constructor)."""
        rows = cls(stream, partition, publish_time, delivery_count, None)
        # Set before first use, so the cached properties below never convert.
        rows.__dict__.update(payloads=[payload], keys=[key], ids=[id], event_times=[event_time])
        rows._headers = [headers]
        return rows

    def _column(self, name: str) -> list[Any]:
        assert self._record_batch is not None
        return self._record_batch.column(name).to_pylist()  # type: ignore[no-any-return]

    @functools.cached_property
    def payloads(self) -> list[bytes]:
        return self._column("payload")

    @functools.cached_property
    def keys(self) -> list[bytes | None]:
        return self._column("key")

    @functools.cached_property
    def ids(self) -> list[str | None]:
        return self._column("id")

    @functools.cached_property
    def event_times(self) -> list[datetime | None]:
        return self._column("event_time")

    @functools.cached_property
    def _header_pairs(self) -> list[list[tuple[str, str]] | None]:
        return self._column("headers")

    def header(self, index: int) -> Mapping[str, str]:
        """Row `index`'s headers as a dict, decoded on first use (the same dict after)."""
        decoded = self._headers
        if decoded is None:
            decoded = self._headers = [None] * len(self._header_pairs)
        value = decoded[index]
        if value is None:
            pairs = self._header_pairs[index]
            value = decoded[index] = dict(pairs) if pairs else {}
        return value


@functools.cache
def _empty_batch() -> pa.RecordBatch:
    """What an empty receive holds. Built from typed null arrays: `pa.array(list)` and
    `from_pylist` import pandas on first use (over a second), which would stall the
    first receive that times out. (pyarrow is imported where messages are handled,
    so the administration calls, which move none, start without it.)"""
    import pyarrow as pa

    from tamto_protocol.batch import BATCH_SCHEMA

    return pa.RecordBatch.from_arrays(
        [pa.nulls(0, f.type) for f in BATCH_SCHEMA], schema=BATCH_SCHEMA
    )


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """A contiguous run of delivered messages from one partition, decoded once.

    Use `record_batch` or `table` for vectorised (pyarrow) processing, or iterate
    to get `Message` objects. Message ``i`` has offset ``first_offset + i``. An
    empty batch (``len(batch) == 0``, partition ``-1``) means nothing arrived in time.
    `delivery_count` is how many times these messages have been delivered, this
    delivery included (1: the first time).
    """

    stream: str
    partition: int
    first_offset: int
    publish_time: datetime
    record_batch: pa.RecordBatch
    delivery_count: int = 1
    #: Key-shared deliveries can skip offsets (other keys went to other consumers):
    #: then this holds every message's offset. None: contiguous from `first_offset`.
    sparse_offsets: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return int(self.record_batch.num_rows)

    @property
    def last_offset(self) -> int:
        """Offset of the last message (``first_offset - 1`` when empty)."""
        if self.sparse_offsets:
            return self.sparse_offsets[-1]
        return self.first_offset + len(self) - 1

    def offset_list(self) -> list[int]:
        """The offsets of the messages, in order."""
        if self.sparse_offsets is not None:
            return list(self.sparse_offsets)
        return list(range(self.first_offset, self.first_offset + len(self)))

    def offset_ranges(self) -> list[tuple[int, int]]:
        """The offsets as inclusive (first, last) runs: what an ack of the batch covers."""
        if self.sparse_offsets is None:
            return [(self.first_offset, self.last_offset)] if len(self) else []
        runs: list[tuple[int, int]] = []
        for offset in self.sparse_offsets:
            if runs and offset == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], offset)
            else:
                runs.append((offset, offset))
        return runs

    @property
    def offsets(self) -> pa.Array:
        """The offsets of the messages as an int64 array."""
        import pyarrow as pa

        return pa.array(self.offset_list(), pa.int64())

    @property
    def table(self) -> pa.Table:
        """The batch as a table with `offset` and `publish_time` columns prepended."""
        import pyarrow as pa

        n = len(self)
        publish = pa.array([self.publish_time] * n, pa.timestamp("us", tz="UTC"))
        columns = [self.offsets, publish, *self.record_batch.columns]
        names = ["offset", "publish_time", *self.record_batch.schema.names]
        return pa.Table.from_arrays(columns, names=names)

    def slice(self, start: int, length: int | None = None) -> MessageBatch:
        """A zero-copy sub-batch starting at index `start`."""
        sliced = self.record_batch.slice(start, length)
        sparse = None
        first = self.first_offset + start
        if self.sparse_offsets is not None:
            sparse = self.sparse_offsets[start : start + sliced.num_rows]
            first = sparse[0] if sparse else first
        return MessageBatch(
            stream=self.stream,
            partition=self.partition,
            first_offset=first,
            publish_time=self.publish_time,
            record_batch=sliced,
            delivery_count=self.delivery_count,
            sparse_offsets=sparse,
        )

    def __iter__(self) -> Iterator[Message]:
        rows = self._rows()
        for index, offset in enumerate(self.offset_list()):
            yield _delivered(rows, index, offset)

    def _rows(self) -> _Rows:
        """The shared, lazily converted columns the batch's `Message` views read."""
        return _Rows(
            self.stream, self.partition, self.publish_time, self.delivery_count, self.record_batch
        )

    @classmethod
    def empty(cls, stream: str) -> MessageBatch:
        """A batch with no messages (what a timed-out receive returns)."""
        return cls(
            stream=stream,
            partition=-1,
            first_offset=0,
            publish_time=_EPOCH,
            record_batch=_empty_batch(),
        )

    @classmethod
    def _from_delivery(cls, delivery: Any) -> MessageBatch:
        from tamto_protocol.batch import decode_valid_batch

        stored = delivery.batch
        # In full: a batch whose offsets lie would read memory outside it.
        record_batch = decode_valid_batch(stored.arrow_ipc)
        return cls(
            stream=delivery.stream,
            partition=int(delivery.partition),
            first_offset=int(stored.base_offset),
            publish_time=publish_time_of(int(stored.publish_time_us)),
            record_batch=record_batch,
            # 0 comes from a server that predates delivery counts: a first delivery.
            delivery_count=int(delivery.delivery_count) or 1,
            sparse_offsets=tuple(delivery.offsets) or None,
        )
