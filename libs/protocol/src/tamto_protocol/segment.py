"""The Parquet segment contract between storage and Spark (DESIGN.md §6, docs/segments.md).

Layout under a storage data directory::

    streams/<stream>/partition=<p>/segment-<first:020d>-<last:020d>.parquet
    streams/<stream>/partition=<p>/_carried/segment-<first:020d>-<last:020d>.g<n>.parquet
    streams/<stream>/_manifest/<version:020d>.json

A segment covers the offsets first..last of its name; it holds every one of
them when first sealed, and only those some subscription still needs after
interest retention rewrote it ("carried forward", generation n >= 1). A
rewritten segment waits under ``_carried/`` (invisible to a plain read) until
the files it replaces are deleted, then takes the plain name.

Everything else storage keeps beside segments (the WAL, cursors, the epoch,
temporary files) has a name starting with ``_`` or ``.``, which Spark's file
listing skips, so ``spark.read.parquet("<data-dir>/streams/<stream>")`` sees
segments only and discovers ``partition`` from the path.

This module is the one place both sides take the schema, the names and the
manifest format from. Blocking I/O only (`read_manifest`): no event loop here.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tamto_protocol.checked import dumps_checked, loads_checked

#: Bumped on any change to SEGMENT_SCHEMA; see docs/segments.md for the rules.
SEGMENT_SCHEMA_VERSION = 1
#: Bumped on any incompatible change to the manifest JSON.
MANIFEST_FORMAT = 1

SCHEMA_VERSION_KEY = b"tamto.schema_version"
FIRST_OFFSET_KEY = b"tamto.first_offset"
LAST_OFFSET_KEY = b"tamto.last_offset"
MIN_PUBLISH_KEY = b"tamto.min_publish_time_us"
MAX_PUBLISH_KEY = b"tamto.max_publish_time_us"
#: How many times retention rewrote the segment (absent: 0, as sealed).
GENERATION_KEY = b"tamto.generation"

UTC_US = pa.timestamp("us", tz="UTC")

#: One schema for every stream. `partition` is not a column: it comes from the path.
SEGMENT_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("publish_time", UTC_US, nullable=False),
        pa.field("event_time", UTC_US),
        pa.field("key", pa.binary()),
        pa.field("payload", pa.binary(), nullable=False),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("id", pa.string()),
        pa.field("producer", pa.string()),
    ],
    metadata={SCHEMA_VERSION_KEY: str(SEGMENT_SCHEMA_VERSION).encode()},
)

MANIFEST_DIR = "_manifest"
#: Where a carried-forward segment waits, inside its partition directory.
CARRIED_DIR = "_carried"
SEGMENT_PREFIX = "segment-"
SEGMENT_SUFFIX = ".parquet"
_SEGMENT_NAME = re.compile(r"^segment-(\d{20})-(\d{20})\.parquet$")
_CARRIED_NAME = re.compile(r"^segment-(\d{20})-(\d{20})\.g(\d+)\.parquet$")
_MANIFEST_NAME = re.compile(r"^(\d{20})\.json$")
_STORE_MANIFEST_NAME = re.compile(r"^partition-(\d+)\.json$")
#: How a whole file's digest is written (``crc32:<8 hex>``, zlib's CRC-32).
DIGEST_PREFIX = "crc32:"


#: The members of a manifest's JSON object (besides its checksum).
_MANIFEST_MEMBERS = frozenset({"format", "version", "segments", "start_offsets", "expired"})


class ManifestError(ValueError):
    """A manifest file that cannot be parsed or is of an unknown format."""


def partition_dir_name(partition: int) -> str:
    """``partition=<p>``: the Hive-style directory name Spark discovers `partition` from."""
    return f"partition={partition}"


def segment_file_name(first_offset: int, last_offset: int) -> str:
    """The name of the segment holding offsets first..last (inclusive): fixed by its offsets."""
    return f"{SEGMENT_PREFIX}{first_offset:020d}-{last_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """(first, last) offsets of a segment file name, or None for any other name."""
    match = _SEGMENT_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def carried_file_name(first_offset: int, last_offset: int, generation: int) -> str:
    """The name under ``_carried/`` of generation `generation` of the segment first..last."""
    return f"{SEGMENT_PREFIX}{first_offset:020d}-{last_offset:020d}.g{generation}{SEGMENT_SUFFIX}"


def parse_carried_name(name: str) -> tuple[int, int, int] | None:
    """(first, last, generation) of a carried segment file name, or None for any other name."""
    match = _CARRIED_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def manifest_file_name(version: int) -> str:
    return f"{version:020d}.json"


def store_manifest_name(partition: int) -> str:
    """The name, under a segment store's ``streams/<stream>/_manifest/``, of the manifest
    of one partition's committed objects (one writer each: the partition's publisher)."""
    return f"partition-{partition}.json"


def parse_store_manifest_name(name: str) -> int | None:
    """The partition of a store manifest name, or None for any other name."""
    match = _STORE_MANIFEST_NAME.match(name)
    return int(match.group(1)) if match else None


def bytes_digest(data: bytes) -> str:
    """The digest of a whole file's bytes, as manifest entries record it."""
    return f"{DIGEST_PREFIX}{zlib.crc32(data) & 0xFFFFFFFF:08x}"


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    """One committed segment as the manifest records it.

    `first_offset`..`last_offset` is the range the segment covers; `rows` may be
    fewer than the range holds once retention carried it forward (`generation`
    >= 1). A `staged` segment's file is under ``_carried/`` (see `file`).
    """

    partition: int
    first_offset: int
    last_offset: int  # inclusive
    rows: int
    size_bytes: int
    min_publish_time_us: int
    max_publish_time_us: int
    schema_version: int = SEGMENT_SCHEMA_VERSION
    generation: int = 0
    staged: bool = False
    #: The whole file's digest (``crc32:<8 hex>``), recorded when it was written;
    #: empty for a segment written before digests existed. Storage checks it
    #: before it first serves the file (see docs/segments.md, Integrity).
    digest: str = ""

    @property
    def end_offset(self) -> int:
        """The offset just past the range the segment covers."""
        return self.last_offset + 1

    @property
    def file(self) -> str:
        """Path relative to the stream directory."""
        if self.staged:
            name = carried_file_name(self.first_offset, self.last_offset, self.generation)
            return f"{partition_dir_name(self.partition)}/{CARRIED_DIR}/{name}"
        name = segment_file_name(self.first_offset, self.last_offset)
        return f"{partition_dir_name(self.partition)}/{name}"

    def to_dict(self) -> dict[str, Any]:
        """The entry's JSON object; `generation`, `staged` and `digest` only when set,
        so a manifest without them reads the same as before they existed."""
        data = asdict(self)
        for name, default in (("generation", 0), ("staged", False), ("digest", "")):
            if data[name] == default:
                del data[name]
        return data


@dataclass(frozen=True, slots=True)
class ExpiredFile:
    """A segment retention removed from the manifest; its file goes after `delete_after_us`."""

    file: str
    delete_after_us: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """One version of a stream's manifest: the segments a reader may use, consistently.

    `start_offsets` holds each partition's retention floor: offsets below it
    were removed by retention.
    """

    version: int = 0
    segments: tuple[SegmentEntry, ...] = ()
    start_offsets: dict[int, int] = field(default_factory=dict)
    expired: tuple[ExpiredFile, ...] = ()

    def for_partition(self, partition: int) -> list[SegmentEntry]:
        """The partition's segments in offset order."""
        found = [s for s in self.segments if s.partition == partition]
        return sorted(found, key=lambda s: s.first_offset)

    def partitions(self) -> list[int]:
        return sorted({s.partition for s in self.segments} | set(self.start_offsets))

    def end_offsets(self) -> dict[int, int]:
        """Per partition, the offset just past the last committed segment."""
        ends = dict(self.start_offsets)
        for s in self.segments:
            ends[s.partition] = max(ends.get(s.partition, 0), s.end_offset)
        return ends

    def to_json(self) -> bytes:
        data = {
            "format": MANIFEST_FORMAT,
            "version": self.version,
            "segments": [s.to_dict() for s in self.segments],
            "start_offsets": {str(p): o for p, o in sorted(self.start_offsets.items())},
            "expired": [asdict(e) for e in self.expired],
        }
        return dumps_checked(data, indent=1)

    @classmethod
    def from_json(cls, data: bytes, source: str) -> Manifest:
        try:
            raw: dict[str, Any] = loads_checked(data, _MANIFEST_MEMBERS)
            if raw.get("format") != MANIFEST_FORMAT:
                raise ManifestError(
                    f"manifest {source} has format {raw.get('format')!r}; "
                    f"this reader knows format {MANIFEST_FORMAT}"
                )
            return cls(
                version=int(raw["version"]),
                segments=tuple(SegmentEntry(**s) for s in raw["segments"]),
                start_offsets={int(p): int(o) for p, o in raw["start_offsets"].items()},
                expired=tuple(ExpiredFile(**e) for e in raw["expired"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, ManifestError):
                raise
            raise ManifestError(f"manifest {source} is not valid: {exc}") from exc


def manifest_versions(stream_dir: Path) -> list[tuple[int, Path]]:
    """The manifest files of a stream, oldest first."""
    directory = stream_dir / MANIFEST_DIR
    try:
        names = [p for p in directory.iterdir() if _MANIFEST_NAME.match(p.name)]
    except FileNotFoundError:
        return []
    return sorted((int(p.name.split(".")[0]), p) for p in names)


def read_manifest(stream_dir: Path, attempts: int = 5) -> Manifest:
    """The newest manifest version of the stream in `stream_dir` (empty when none).

    Each version is a complete snapshot written atomically, so the newest one
    is a consistent view. A version can be removed between listing and reading
    (storage keeps only the last few): the listing is then taken again.
    """
    for _ in range(attempts):
        versions = manifest_versions(stream_dir)
        if not versions:
            return Manifest()
        _, path = versions[-1]
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        return Manifest.from_json(data, str(path))
    raise ManifestError(f"the manifest in {stream_dir} kept changing under {attempts} reads")
