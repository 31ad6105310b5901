"""The readers freshness is measured for, each polled as an outside reader would poll it.

- `StoreReader`: the segment store (a directory or S3) read as the `tamto` Spark data
  source reads it: each partition's manifest (``streams/<stream>/_manifest/
  partition-<p>.json``), written by the partition's publisher after the objects it
  lists. A plain ``spark.read.parquet`` listing sees an object a moment before its
  manifest names it; the manifest is what the data source plans from.
- `IcebergReader`: the stream's Iceberg table read with PyIceberg through the SQL
  catalog storage commits to: the data files of the current snapshot.

`Watcher` polls one reader until told to stop, and keeps every poll as a `Sighting`.
The readers block (files, S3, SQLite): `Watcher` calls them through a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import pyarrow.fs as pafs

from tamto_bench.freshness import Probe, Sighting, all_visible
from tamto_local.s3 import ACCESS_KEY, REGION, SECRET_KEY
from tamto_protocol.segment import (
    MANIFEST_DIR,
    Manifest,
    parse_segment_name,
    store_manifest_name,
)


class Reader(Protocol):
    """Something that says, per partition, where what it can read ends (blocking)."""

    def ends(self) -> Mapping[int, int]: ...


def with_credentials(uri: str) -> str:
    """An S3 store URI with the local SeaweedFS's key in it (as executors of the `tamto`
    source are given it); any other URI as it is."""
    parts = urlsplit(uri)
    if parts.scheme != "s3" or "@" in parts.netloc:
        return uri
    netloc = f"{ACCESS_KEY}:{SECRET_KEY}@{parts.netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class StoreReader:
    """A stream's per-partition manifests in a segment store."""

    def __init__(self, store_uri: str, stream: str, partitions: int) -> None:
        self._fs, root = pafs.FileSystem.from_uri(with_credentials(store_uri))
        self._dir = f"{root.rstrip('/')}/streams/{stream}/{MANIFEST_DIR}"
        self._partitions = partitions
        #: Segments listed in the last poll, over every partition.
        self.segments = 0

    def ends(self) -> dict[int, int]:
        found: dict[int, int] = {}
        segments = 0
        for partition in range(self._partitions):
            path = f"{self._dir}/{store_manifest_name(partition)}"
            try:
                with self._fs.open_input_file(path) as f:
                    data = bytes(f.read())
            except FileNotFoundError:
                continue
            manifest = Manifest.from_json(data, path)
            mine = [s for s in manifest.segments if s.partition == partition]
            segments += len(mine)
            if mine:
                found[partition] = max(s.end_offset for s in mine)
        self.segments = segments
        return found


class IcebergReader:
    """A stream's Iceberg table, through the SQL catalog storage commits to."""

    def __init__(self, catalog_uri: str, store_uri: str, stream: str) -> None:
        from pyiceberg.catalog.sql import SqlCatalog  # loaded only when measured

        properties = {"uri": catalog_uri}
        query = dict(
            pair.split("=", 1) for pair in urlsplit(store_uri).query.split("&") if "=" in pair
        )
        if "endpoint_override" in query:
            properties |= {
                "s3.endpoint": f"{query.get('scheme', 'https')}://{query['endpoint_override']}",
                "s3.region": query.get("region", REGION),
                "s3.access-key-id": ACCESS_KEY,
                "s3.secret-access-key": SECRET_KEY,
            }
        self._catalog = SqlCatalog("tamto", **properties)
        self._identifier = ("tamto", stream)
        self._snapshot: int | None = None
        self._ends: dict[int, int] = {}

    def ends(self) -> dict[int, int]:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = self._catalog.load_table(self._identifier)
        except NoSuchTableError:
            return {}
        snapshot = table.current_snapshot()
        if snapshot is None or snapshot.snapshot_id == self._snapshot:
            return dict(self._ends)
        found: dict[int, int] = {}
        for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files():
            parsed = parse_segment_name(task.file.file_path.rsplit("/", 1)[-1])
            if parsed is not None:
                partition = int(task.file.partition[0])
                found[partition] = max(found.get(partition, 0), parsed[1] + 1)
        self._snapshot, self._ends = snapshot.snapshot_id, found
        return dict(found)


@dataclass
class Watcher:
    """Polls `reader` every `period_s` until `stop`; every poll is kept."""

    reader: Reader
    period_s: float
    sightings: list[Sighting] = field(default_factory=list)
    #: Polls that failed (a manifest replaced mid-read, a commit in progress): skipped.
    errors: int = 0
    #: Seconds the slowest poll took.
    slowest_s: float = 0.0
    #: Set once a poll shows every probe given to `expect`.
    showed_all: asyncio.Event = field(default_factory=asyncio.Event)
    _expected: Sequence[Probe] | None = None

    def expect(self, probes: Sequence[Probe]) -> None:
        """Set `showed_all` once a poll shows every one of `probes` (now, if one did)."""
        self._expected = probes
        self._check()

    def _check(self) -> None:
        if self._expected is not None and all_visible(self._expected, self.latest):
            self.showed_all.set()

    @property
    def latest(self) -> Mapping[int, int]:
        """What the last successful poll saw (nothing before the first)."""
        return self.sightings[-1].ends if self.sightings else {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            at = time.time()
            try:
                ends = await asyncio.to_thread(self.reader.ends)
            except Exception:  # a poll that failed is one sample fewer, not an end
                self.errors += 1
            else:
                self.sightings.append(Sighting(at, ends))
                self._check()
            self.slowest_s = max(self.slowest_s, time.time() - at)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.period_s)
