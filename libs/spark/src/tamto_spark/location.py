"""Where the `tamto` data source reads a stream: a storage data directory, or the cluster's
segment store (a directory or S3), and the manifest it plans from there.

A location is a local path (``/data/streams/orders``) or a URI pyarrow's filesystem
layer opens (``file:///store/streams/orders``, ``s3://key:secret@bucket/prefix/streams/
orders?endpoint_override=host:port&scheme=http``; without ``key:secret@`` the usual
``AWS_*`` variables). A storage data directory holds the stream's versioned
manifest (``_manifest/<version>.json``); a segment store holds one manifest per
partition (``_manifest/partition-<p>.json``, written by the partition's publisher),
merged here into one snapshot. Either way each entry carries the object's size and
digest, checked when a slice is read (`tamto_spark.segments.read_slice`).

Blocking I/O: call on the driver or in an executor's task.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from tamto_protocol.segment import (
    MANIFEST_DIR,
    Manifest,
    manifest_versions,
    parse_store_manifest_name,
    read_manifest,
)


def open_location(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a location (a local path or a URI)."""
    if "://" not in location:
        return pafs.LocalFileSystem(), str(Path(location).resolve())
    filesystem, path = pafs.FileSystem.from_uri(location)
    return filesystem, str(path)


def child(location: str, relative: str) -> str:
    """The location of `relative` under `location` (a URI keeps its query)."""
    parts = urlsplit(location)
    if "://" not in location or not parts.query:
        return f"{location.rstrip('/')}/{relative}"
    return f"{location.split('?', 1)[0].rstrip('/')}/{relative}?{parts.query}"


def shown(location: str) -> str:
    """`location` as messages show it: without credentials or query."""
    parts = urlsplit(location)
    if "://" not in location:
        return location
    return f"{parts.scheme}://{parts.hostname or ''}{parts.path}"


def exists(location: str) -> bool:
    """Whether anything is stored at `location`."""
    filesystem, path = open_location(location)
    return bool(filesystem.get_file_info(path).type != pafs.FileType.NotFound)


def read_stream_manifest(location: str) -> Manifest:
    """The manifest snapshot of the stream at `location` (empty when it has none yet)."""
    filesystem, path = open_location(location)
    local = isinstance(filesystem, pafs.LocalFileSystem)
    if local and manifest_versions(Path(path)):
        return read_manifest(Path(path))  # a storage data directory
    selector = pafs.FileSelector(f"{path}/{MANIFEST_DIR}", allow_not_found=True)
    merged = Manifest()
    for info in filesystem.get_file_info(selector):
        partition = parse_store_manifest_name(info.base_name)
        if partition is None:
            continue
        with filesystem.open_input_file(info.path) as f:
            data = bytes(f.read())
        part = Manifest.from_json(data, child(location, f"{MANIFEST_DIR}/{info.base_name}"))
        mine = tuple(e for e in part.segments if e.partition == partition)
        starts = {p: o for p, o in part.start_offsets.items() if p == partition}
        merged = Manifest(
            merged.version + part.version,
            merged.segments + mine,
            {**merged.start_offsets, **starts},
        )
    return merged
