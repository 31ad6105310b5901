"""A producer batch: the messages one Publish RPC carries to one partition, and how
its outcome reaches each message's future.

Single `send` calls join the batch's open run of singles (`_Singles`); the rows of a
`send_batch` call join as one part (`Rows`) whose outcome (`BatchOutcome`) resolves
that call's future once all its rows are stored. The accumulator
(`tamto_sdk.accumulator`) decides what goes into which batch and when it may go;
this module only holds the batch and resolves or fails what it holds.
"""

from __future__ import annotations

import array
import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime

import pyarrow as pa

from tamto_sdk.columns import Columns, concat_columns, int_array, message_columns
from tamto_sdk.errors import TamtoError
from tamto_sdk.messages import PublishedBatch, PublishResult, datetime_to_us

__all__ = ["BatchOutcome", "ProducerBatch", "Rows"]

# `PublishResult` is a frozen dataclass with slots; its generated __init__ sets each
# field through object.__setattr__, which costs three times what setting the slots
# directly does. Results are built once per message, so they are built this way.
_new_result = object.__new__
_set_stream = PublishResult.__dict__["stream"].__set__
_set_partition = PublishResult.__dict__["partition"].__set__
_set_offset = PublishResult.__dict__["offset"].__set__


class _Extras:
    """The optional fields of a batch's single messages, once one of them has any."""

    __slots__ = ("event_times", "headers", "ids", "keys")

    def __init__(self, count: int) -> None:
        self.keys: list[bytes | None] = [None] * count
        self.headers: list[Mapping[str, str] | None] = [None] * count
        self.ids: list[str | None] = [None] * count
        self.event_times: list[int | None] = [None] * count


class _Singles:
    """Messages given one by one to `send`, each with its own future."""

    __slots__ = ("extras", "futures", "payloads")

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.futures: list[asyncio.Future[PublishResult]] = []
        self.extras: _Extras | None = None

    def __len__(self) -> int:
        return len(self.payloads)

    def add(
        self,
        payload: bytes,
        future: asyncio.Future[PublishResult],
        key: bytes | None,
        headers: Mapping[str, str] | None,
        id: str | None,
        event_time: datetime | None,
    ) -> None:
        """Append a message with optional fields (their lists start on first use)."""
        extras = self.extras
        if extras is None:
            extras = self.extras = _Extras(len(self.payloads))
        self.payloads.append(payload)
        self.futures.append(future)
        extras.keys.append(key)
        extras.headers.append(headers)
        extras.ids.append(id)
        extras.event_times.append(datetime_to_us(event_time) if event_time is not None else None)

    def columns(self) -> Columns:
        extras = self.extras
        if extras is None:
            return message_columns(self.payloads)
        return message_columns(
            self.payloads, extras.keys, extras.headers, extras.ids, extras.event_times
        )

    def resolve(self, stream: str, partition: int, offsets: Sequence[int]) -> None:
        for future, offset in zip(self.futures, offsets, strict=True):
            if not future.done():
                result = _new_result(PublishResult)
                _set_stream(result, stream)
                _set_partition(result, partition)
                _set_offset(result, offset)
                future.set_result(result)

    def fail(self, error: TamtoError) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(error)


class BatchOutcome:
    """The one future of a `send_batch` call, filled in as its rows are published."""

    __slots__ = ("future", "offsets", "partitions", "remaining", "stream")

    def __init__(self, stream: str, count: int, future: asyncio.Future[PublishedBatch]) -> None:
        self.stream = stream
        self.future = future
        self.remaining = count
        self.partitions = array.array("i", bytes(4 * count))
        self.offsets = array.array("q", bytes(8 * count))
        if count == 0:
            self._complete()

    def fill(self, rows: range | list[int], partition: int, offsets: Sequence[int]) -> None:
        """The call's `rows` were stored in `partition` at `offsets`."""
        if isinstance(rows, range):
            self.partitions[rows.start : rows.stop] = array.array("i", [partition]) * len(rows)
            self.offsets[rows.start : rows.stop] = (
                array.array("q", offsets) if not isinstance(offsets, array.array) else offsets
            )
        else:
            for row, offset in zip(rows, offsets, strict=True):
                self.partitions[row] = partition
                self.offsets[row] = offset
        self.remaining -= len(rows)
        if self.remaining == 0:
            self._complete()

    def _complete(self) -> None:
        if not self.future.done():
            self.future.set_result(
                PublishedBatch(
                    self.stream,
                    int_array(self.partitions, pa.int32()),
                    int_array(self.offsets, pa.int64()),
                )
            )

    def fail(self, error: TamtoError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class Rows:
    """Rows of one `send_batch` call: their columns and where they sit in the call."""

    __slots__ = ("arrays", "outcome", "rows")

    def __init__(self, arrays: Columns, outcome: BatchOutcome, rows: range | list[int]) -> None:
        self.arrays = arrays
        self.outcome = outcome
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def columns(self) -> Columns:
        return self.arrays

    def resolve(self, stream: str, partition: int, offsets: Sequence[int]) -> None:
        self.outcome.fill(self.rows, partition, offsets)

    def fail(self, error: TamtoError) -> None:
        self.outcome.fail(error)


class ProducerBatch:
    """One batch for one partition: what one Publish RPC carries.

    Single messages go into `singles` (the open run); rows from `send_batch` close
    that run and follow it as a `Rows` part, so the order of calls is kept.
    `done` resolves once the batch's outcome reached its futures (`flush` waits on it).
    """

    __slots__ = ("bytes", "count", "done", "first_at", "parts", "singles")

    def __init__(self, now: float, done: asyncio.Future[None]) -> None:
        self.singles = _Singles()
        self.parts: list[_Singles | Rows] = []
        self.count = 0
        self.bytes = 0
        self.first_at = now
        self.done = done

    def add_rows(self, part: Rows, size: int) -> None:
        if self.singles.payloads:
            self.parts.append(self.singles)
            self.singles = _Singles()
        self.parts.append(part)
        self.count += len(part)
        self.bytes += size

    def all_parts(self) -> list[_Singles | Rows]:
        return [*self.parts, self.singles] if self.singles.payloads else self.parts

    def columns(self) -> Columns:
        """key, payload, headers, id, event_time of every message, in order."""
        return concat_columns([part.columns() for part in self.all_parts()])

    def resolve(self, stream: str, partition: int, offsets: Sequence[int]) -> None:
        """Every message was stored: hand each future its offset."""
        start = 0
        for part in self.all_parts():
            n = len(part)
            part.resolve(stream, partition, offsets[start : start + n])
            start += n

    def fail(self, error: TamtoError) -> None:
        for part in self.all_parts():
            part.fail(error)
