"""The `tamto` Spark data source (PySpark Python Data Source API, Spark >= 4.0).

Register once per session (`register(spark)`, done by `tamto_spark.session`), then::

    spark.read.format("tamto").load("<data-dir>/streams/orders")              # batch
    spark.read.format("tamto").load("s3://bucket/prefix/streams/orders?endpoint_override=...")
    spark.read.format("tamto").option("store", "file:///shared/store")
         .option("stream", "orders").load()                                   # segment store
    spark.read.format("tamto").option("startingOffsets", '{"0": 100}')
         .option("endingOffsets", '{"0": 200}').load(path)                     # offset range
    spark.read.format("tamto").option("startTime", "2026-01-01T00:00:00Z").load(path)
    spark.readStream.format("tamto").load(path)                                # streaming
    df.write.format("tamto").mode("append").option("url", "tamto://host:7400")
      .option("apiKey", key).save("orders")                                    # publish rows

Reading uses one manifest snapshot per batch query (or per micro-batch), so a
query sees whole segments only and never a segment twice: a data directory's
manifest, or the segment store's (`tamto_spark.location`), whose objects are
each checked for their size and digest before they are decoded. Streaming progress
is the manifest's per-partition end offsets, ``{"<partition>": <next-offset>}``,
which Spark checkpoints: a restarted query continues exactly after the last
committed micro-batch.

Writing publishes through the gateway with the SDK. Every row gets a dedup id:
the row's own `id` column when it has one, else ``<idPrefix>:<spark-partition>:<row>``,
where `idPrefix` is the `idPrefix` option or a random one chosen once on the
driver per write. A retried task re-reads the same input partition in the same
order and so sends the same ids, which the router's dedup window drops: a
retry does not duplicate (within the stream's `dedup_window_ms`).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from tamto_protocol.segment import Manifest
from tamto_spark.location import child, exists, read_stream_manifest, shown
from tamto_spark.segments import SPARK_DDL, Range, SegmentSlice, plan_slices, read_slice

NAME = "tamto"
_SETTLE_EVERY = 10_000  # rows between waits for acknowledgements while publishing


class OptionError(ValueError):
    """A data source option with a bad or missing value."""


def register(spark: SparkSession) -> None:
    """Make `format("tamto")` available in `spark`, and `spark` the calling thread's
    active session.

    Spark finds a Python data source a write names through the calling thread's active
    session (a read, through its own session), and PySpark gives each Python thread a
    JVM thread of its own, with no active session in a new one: a
    `df.write.format("tamto")` from a thread other than the one that made the session
    failed with DATA_SOURCE_NOT_FOUND. A thread that writes calls this first.
    """
    spark.dataSource.register(TamtoDataSource)
    jvm = spark._jvm
    assert jvm is not None, "a classic (not Spark Connect) session"
    SparkSession._get_j_spark_session_class(jvm).setActiveSession(spark._jsparkSession)


class TamtoDataSource(DataSource):
    """`format("tamto")`: read segments of a stream, or publish rows into one."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SPARK_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return TamtoBatchReader(stream_dir(self.options), read_range(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TamtoStreamReader(stream_dir(self.options), dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> TamtoWriter:
        if overwrite:
            raise OptionError("a Tamto stream is append-only: use mode('append')")
        return TamtoWriter(WriteOptions.parse(self.options, schema))


def stream_dir(options: Mapping[str, str]) -> str:
    """The stream's location (`tamto_spark.location`): the `path` option (`load(path)`),
    or `dataDir` (a storage data directory) or `store` (the segment store's URI) +
    `stream`."""
    if options.get("path"):
        return options["path"]
    root = options.get("dataDir") or options.get("store")
    if root and options.get("stream"):
        return child(root, f"streams/{options['stream']}")
    raise OptionError(
        "say which stream to read: load('<data-dir or store>/streams/<stream>') "
        "or option dataDir or store, and stream"
    )


def _offsets(options: Mapping[str, str], name: str) -> dict[int, int]:
    raw = options.get(name)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
        return {int(p): int(o) for p, o in parsed.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise OptionError(
            f'option {name} must be JSON like {{"0": 42}} (partition -> offset), got {raw!r}'
        ) from exc


def _time_us(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if not raw:
        return None
    if raw.lstrip("-").isdigit():
        return int(raw)
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise OptionError(
            f"option {name} must be ISO-8601 (2026-01-31T12:00:00Z) or microseconds, got {raw!r}"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000)


def read_range(options: Mapping[str, str]) -> Range:
    """The offset/time range the batch read options ask for."""
    return Range(
        start=_offsets(options, "startingOffsets"),
        end=_offsets(options, "endingOffsets"),
        start_time_us=_time_us(options, "startTime"),
        end_time_us=_time_us(options, "endTime"),
    )


class TamtoBatchReader(DataSourceReader):
    """Plans from one manifest snapshot, taken on the driver when the query is planned."""

    def __init__(self, directory: str, wanted: Range) -> None:
        self._dir = directory
        self._range = wanted

    def partitions(self) -> Sequence[InputPartition]:
        if not exists(self._dir):
            raise OptionError(f"no stream data at {shown(self._dir)}")
        manifest = read_stream_manifest(self._dir)
        return [InputPartition(s) for s in plan_slices(self._dir, manifest, self._range)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(partition)


def _read(partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
    # With nothing planned Spark still runs one task, with no partition value.
    slice_: SegmentSlice | None = partition.value if partition is not None else None
    if slice_ is not None:
        yield from read_slice(slice_)


def _start_offsets(manifest: Manifest) -> dict[str, int]:
    starts = dict(manifest.start_offsets)
    for entry in manifest.segments:
        starts[entry.partition] = min(
            starts.get(entry.partition, entry.first_offset), entry.first_offset
        )
    return {str(p): o for p, o in sorted(starts.items())}


class TamtoStreamReader(DataSourceStreamReader):
    """Structured Streaming over new segments; offsets are ``{"<partition>": <next-offset>}``.

    Options: `startingOffsets` — ``earliest`` (default), ``latest`` or JSON
    offsets — applies only when the query has no checkpoint yet.
    """

    def __init__(self, directory: str, options: Mapping[str, str]) -> None:
        self._dir = directory
        self._starting = options.get("startingOffsets", "earliest")

    def initialOffset(self) -> dict[str, int]:
        manifest = read_stream_manifest(self._dir)
        if self._starting == "earliest":
            return _start_offsets(manifest)
        if self._starting == "latest":
            return {str(p): o for p, o in sorted(manifest.end_offsets().items())}
        return {str(p): o for p, o in _offsets({"s": self._starting}, "s").items()}

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        """Every committed segment's end (the read limit, if any, is not applied)."""
        ends = read_stream_manifest(self._dir).end_offsets()
        latest = {str(p): o for p, o in sorted(ends.items())}
        if start:  # never move backwards (a partition only ever grows)
            for p, o in start.items():
                latest[p] = max(latest.get(p, o), o)
        return latest

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        manifest = read_stream_manifest(self._dir)
        wanted = Range(
            start={int(p): o for p, o in start.items()},
            end={int(p): o for p, o in end.items()},
        )
        # A partition absent from `end` gained its first segment after `end` was
        # decided: it belongs to a later micro-batch.
        known = {int(p) for p in end}
        slices = plan_slices(self._dir, manifest, wanted)
        return [InputPartition(s) for s in slices if s.partition in known]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: segments are immutable and retention owns their lifetime."""


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """How `df.write.format("tamto")` publishes."""

    url: str
    api_key: str
    stream: str
    id_prefix: str
    columns: tuple[str, ...]
    linger_ms: int = 5
    fail_first_attempt_after_rows: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> WriteOptions:
        url = options.get("url") or os.environ.get("TAMTO_URL")
        if not url:
            raise OptionError("option url (or TAMTO_URL) must name the gateway: tamto://host:port")
        stream = options.get("stream") or options.get("path")
        if not stream:
            raise OptionError("name the stream: save('<stream>') or option stream")
        api_key = options.get("apiKey") or os.environ.get("TAMTO_API_KEY")
        if not api_key:
            raise OptionError("option apiKey (or TAMTO_API_KEY) is required to publish")
        names = tuple(schema.fieldNames())
        if "payload" not in names:
            raise OptionError(f"the DataFrame needs a payload column; it has {list(names)}")
        fail_after = options.get("failFirstAttemptAfterRows")
        return cls(
            url=url,
            api_key=api_key,
            stream=stream,
            id_prefix=options.get("idPrefix") or uuid.uuid4().hex,
            columns=names,
            fail_first_attempt_after_rows=int(fail_after) if fail_after else None,
        )


class InjectedFailure(RuntimeError):
    """The fault `failFirstAttemptAfterRows` asks for: proves a retried task does not duplicate."""


@dataclass
class Published(WriterCommitMessage):
    """What one task published."""

    rows: int


class TamtoWriter(DataSourceArrowWriter):
    """Publishes each task's rows through the gateway, with deterministic dedup ids.

    Input columns: `payload` (binary or string, required), and optionally
    `key` (binary or string), `headers` (map<string,string>), `event_time`
    (timestamp) and `id` (string). Created on the driver and shipped to every
    task, so `id_prefix` is the same in every attempt of every task.

    `failFirstAttemptAfterRows` (testing, demos): the first attempt of Spark
    partition 0 fails after publishing that many rows, so the retry's dedup can be seen.
    """

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        fail_after = self.options.fail_first_attempt_after_rows
        if fail_after is None or attempt > 0 or partition != 0:
            fail_after = None
        rows = asyncio.run(_publish(self.options, iterator, partition, fail_after))
        return Published(rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: every row was acknowledged durable before its task ended."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Rows already published stay; a rerun with the same idPrefix dedups them."""


def _text_or_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


async def _publish(
    options: WriteOptions,
    batches: Iterator[pa.RecordBatch],
    spark_partition: int,
    fail_after: int | None,
) -> int:
    import tamto_sdk

    row = 0
    unresolved: list[asyncio.Future[Any]] = []

    async def settle() -> None:
        # Every acknowledgement, so a failed publish fails the task (and Spark retries it).
        await asyncio.gather(*unresolved)
        unresolved.clear()

    async with tamto_sdk.connect(options.url, api_key=options.api_key) as client:
        async with client.producer(options.stream) as producer:
            for batch in batches:
                columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
                payloads = columns["payload"]
                for i in range(batch.num_rows):
                    own_id = columns["id"][i] if "id" in columns else None
                    headers = columns["headers"][i] if "headers" in columns else None
                    event_time = columns["event_time"][i] if "event_time" in columns else None
                    future = await producer.send(
                        _text_or_bytes(payloads[i]) or b"",
                        key=_text_or_bytes(columns["key"][i]) if "key" in columns else None,
                        headers=dict(headers) if headers else None,
                        id=own_id or f"{options.id_prefix}:{spark_partition}:{row}",
                        event_time=event_time,
                    )
                    unresolved.append(future)
                    row += 1
                    if len(unresolved) >= _SETTLE_EVERY:
                        await settle()
                    if fail_after is not None and row == fail_after:
                        await settle()
                        raise InjectedFailure(
                            f"failFirstAttemptAfterRows: failing after {row} published rows"
                        )
            await producer.flush()
            await settle()
    return row
