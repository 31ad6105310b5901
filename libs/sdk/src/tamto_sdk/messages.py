"""Public value types of messages (publish results, delivered messages and batches) and
their conversion from protobuf; the streams' own values are `tamto_sdk.stream_config`.
Protobuf types never leave this module's functions.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "Message",
    "MessageBatch",
    "PublishResult",
    "PublishedBatch",
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

        if self.sparse_offsets is not None:
            return pa.array(self.sparse_offsets, pa.int64())
        import numpy as np

        return pa.array(np.arange(self.first_offset, self.first_offset + len(self), dtype=np.int64))

    @property
    def table(self) -> pa.Table:
        """The batch as a table with `offset` and `publish_time` columns prepended."""
        import pyarrow as pa

        n = len(self)
        moment = pa.scalar(self.publish_time, pa.timestamp("us", tz="UTC"))
        publish = pa.repeat(moment, n)
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
