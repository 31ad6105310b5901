"""The cluster's segment store: one place, named by a URI, that every storage node seals into.

A store is a directory (``file:///...``: a local disk for one node, NFS or any
shared mount for a cluster) or object storage (``s3://bucket/prefix?endpoint_override=
host:port&scheme=http``, credentials from the usual ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``), reached through pyarrow's filesystem layer
(`pyarrow.fs.FileSystem.from_uri`), never a hand-written client. Its layout is
the data directory's, segments only:

    <root>/streams/<stream>/partition=<p>/segment-<first:020d>-<last:020d>.parquet

so ``spark.read.parquet("<root>/streams/<stream>")`` (or Polars, DuckDB,
pyarrow) reads every committed message once, ``partition`` from the path.

A segment is committed when its object exists under its final name, and a
reader never sees a partial one: on a directory store it is written to a
hidden temporary name (``.segment-...tmp``, skipped by every Parquet listing),
fsynced and renamed into place; an S3 PUT (single or multipart) becomes
visible whole when it completes. Writing a name that exists writes the same
bytes again (segments are deterministic), so a retry is harmless.

Every call here blocks: call through a thread.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import parse_qsl, urlsplit

import pyarrow.fs as pafs

from tamto_common.durable import make_dirs, write_atomic
from tamto_common.errors import InvalidArgument
from tamto_protocol.segment import (
    MANIFEST_DIR,
    Manifest,
    parse_segment_name,
    store_manifest_name,
)

_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class StoredSegment:
    """A committed segment object: its offsets and size."""

    first_offset: int
    last_offset: int
    size: int

    @property
    def end_offset(self) -> int:
        return self.last_offset + 1


def overlapped(segments: list[StoredSegment]) -> list[StoredSegment]:
    """The segments that lose to another they overlap: by first offset, then the
    shorter one wins; every node that looks decides the same."""
    losers = []
    end: int | None = None
    for segment in sorted(segments, key=lambda s: (s.first_offset, s.last_offset)):
        if end is not None and segment.first_offset < end:
            losers.append(segment)
        else:
            end = segment.end_offset
    return losers


class SegmentStore:
    """One cluster segment store. Create with `SegmentStore.open`."""

    def __init__(self, uri: str, filesystem: pafs.FileSystem, root: str) -> None:
        self.uri = uri
        self._fs = filesystem
        self._root = root.rstrip("/")
        self._local = isinstance(filesystem, pafs.LocalFileSystem)

    @classmethod
    def open(cls, uri: str) -> SegmentStore:
        """The store `uri` names; InvalidArgument for a scheme or URI pyarrow cannot open."""
        scheme = urlsplit(uri).scheme
        if scheme not in ("file", "s3"):
            raise InvalidArgument(f"segment store {uri!r}: use a file:// or s3:// URI")
        try:
            filesystem, root = pafs.FileSystem.from_uri(uri)
        except (ValueError, OSError) as exc:
            raise InvalidArgument(f"segment store {uri!r} cannot be opened: {exc}") from exc
        return cls(uri, filesystem, root)

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs

    @property
    def root(self) -> str:
        """The store's root path on its filesystem (``/dir`` or ``bucket/prefix``)."""
        return self._root

    def partition_path(self, stream: str, partition: int) -> str:
        """The store path of a partition's segments (no trailing slash)."""
        return f"{self._root}/streams/{stream}/partition={partition}"

    def stream_path(self, stream: str) -> str:
        """What a reader passes to ``spark.read.parquet`` (with the store's scheme)."""
        return f"{self._root}/streams/{stream}"

    def committed(self, stream: str, partition: int) -> list[StoredSegment]:
        """The partition's committed segments, by first offset (hidden names skipped)."""
        selector = pafs.FileSelector(self.partition_path(stream, partition), allow_not_found=True)
        found = []
        for info in self._fs.get_file_info(selector):
            parsed = parse_segment_name(info.base_name)
            if info.type == pafs.FileType.File and parsed is not None:
                found.append(StoredSegment(parsed[0], parsed[1], int(info.size or 0)))
        return sorted(found, key=lambda s: s.first_offset)

    def committed_end(self, stream: str, partition: int) -> int | None:
        """Where the partition's next segment starts in the store; None when it has none.

        The store's segments of a partition are contiguous (one sealer at a time,
        each starting where the last ended), so the end is the last one's.
        """
        segments = self.committed(stream, partition)
        return segments[-1].end_offset if segments else None

    def put_file(self, stream: str, partition: int, name: str, source: Path) -> None:
        """Commit the local file `source` as segment `name`: whole or not at all."""
        with source.open("rb") as f:
            self.put(stream, partition, name, lambda out: shutil.copyfileobj(f, out, _CHUNK))

    def put(
        self, stream: str, partition: int, name: str, write: Callable[[BinaryIO], object]
    ) -> None:
        """Commit segment `name` as `write` writes it: whole or not at all."""
        self._put(f"{self.partition_path(stream, partition)}/{name}", write)

    def manifest_path(self, stream: str, partition: int) -> str:
        """The store path of a partition's manifest (hidden from Parquet listings by ``_``)."""
        return f"{self.stream_path(stream)}/{MANIFEST_DIR}/{store_manifest_name(partition)}"

    def read_manifest(self, stream: str, partition: int) -> Manifest:
        """The partition's manifest in the store (empty when it has none yet)."""
        path = self.manifest_path(stream, partition)
        try:
            with self._fs.open_input_file(path) as f:
                data = bytes(f.read())
        except FileNotFoundError:
            return Manifest()
        return Manifest.from_json(data, self.location(path))

    def put_manifest(self, stream: str, partition: int, manifest: Manifest) -> None:
        """Replace the partition's manifest, whole (a reader sees the old one or the new)."""
        data = manifest.to_json()
        self._put(self.manifest_path(stream, partition), lambda out: out.write(data))

    def delete_stream(self, stream: str) -> None:
        """Remove every object of `stream` (segments and manifests); none: nothing to do."""
        self._delete_tree(self.stream_path(stream))

    def delete_location(self, location: str) -> None:
        """Remove everything under `location`, a URI of this store (`location`'s form:
        an Iceberg table's); none: nothing to do."""
        parts = urlsplit(location)
        self._delete_tree(parts.path if self._local else f"{parts.netloc}{parts.path}")

    def _delete_tree(self, path: str) -> None:
        """Remove every object under `path` (none: nothing to do). SeaweedFS may still
        report the emptied prefix as a directory, with nothing in it and nothing to delete."""
        if self._fs.get_file_info(path).type == pafs.FileType.NotFound:
            return
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_dir(path)

    def _put(self, target: str, write: Callable[[BinaryIO], object]) -> None:
        if self._local:
            make_dirs(Path(target).parent)
            write_atomic(Path(target), write)  # hidden temporary name, fsync, rename
            return
        # An S3 object appears whole when its upload completes, never in part.
        with self._fs.open_output_stream(target) as out:
            write(out)

    def location(self, path: str) -> str:
        """The URI of a store path, as other readers name it (``file:///...``, ``s3://...``)."""
        return f"{urlsplit(self.uri).scheme}://{'/' if self._local else ''}{path.lstrip('/')}"

    def s3_options(self) -> dict[str, str]:
        """The S3 URI's query (endpoint_override, scheme, region), empty for a directory."""
        return {} if self._local else dict(parse_qsl(urlsplit(self.uri).query))

    def delete(self, stream: str, partition: int, name: str) -> None:
        """Remove a segment object (one that lost an overlap, `overlapped`)."""
        self._fs.delete_file(f"{self.partition_path(stream, partition)}/{name}")

    def read(self, stream: str, partition: int, name: str) -> bytes:
        """The bytes of a committed segment (FileNotFoundError when it is not committed)."""
        with self._fs.open_input_file(f"{self.partition_path(stream, partition)}/{name}") as f:
            return bytes(f.read())

    def object_location(self, stream: str, partition: int, name: str) -> str:
        """How errors name a segment object (its URI)."""
        return self.location(f"{self.partition_path(stream, partition)}/{name}")


def is_data_dir(uri: str, data_dir: Path) -> bool:
    """Whether `uri` is the node's own data directory (the default: nothing to copy)."""
    parts = urlsplit(uri)
    return parts.scheme == "file" and Path(parts.path).resolve() == data_dir.resolve()
