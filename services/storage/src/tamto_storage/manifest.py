"""The writer side of a stream's manifest (format in `tamto_protocol.segment`).

Every change writes a complete new version, ``_manifest/<version:020d>.json``,
atomically (temporary file, fsync, rename, fsync of the directory); readers
take the newest version, so each read is a consistent snapshot. The last
`KEEP_VERSIONS` versions stay, so a reader that listed a version a moment ago
still finds it. One `StreamManifest` per stream and storage node serialises
its writers with a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import structlog

from tamto_common.durable import make_dirs, write_atomic
from tamto_protocol.segment import (
    MANIFEST_DIR,
    Manifest,
    ManifestError,
    manifest_file_name,
    manifest_versions,
)

log = structlog.get_logger(__name__)

KEEP_VERSIONS = 3


class StreamManifest:
    """The manifest of one stream on this node. Create with `StreamManifest.load`."""

    def __init__(self, stream_dir: Path, current: Manifest) -> None:
        self._dir = stream_dir / MANIFEST_DIR
        self._stream_dir = stream_dir
        self._current = current
        self._lock = asyncio.Lock()
        #: Versions found damaged when loading, one line each (`tamto storage verify`).
        self.damage: list[str] = []

    @classmethod
    async def load(cls, stream_dir: Path) -> StreamManifest:
        """The stream's newest readable manifest version (empty when it has none yet).

        A damaged newest version (bad JSON, checksum mismatch) does not stop the
        stream: the newest older version that reads is taken, and loading the
        partitions reconciles it with the segment files on disk, then writes the
        next version over the damaged one. What only the lost version knew (a
        retention floor or grace deadline set by its change) is taken again from
        the older version; `damage` says what was skipped.
        """
        current, damage = await asyncio.to_thread(newest_readable, stream_dir)
        manifest = cls(stream_dir, current)
        if damage:
            # A whole version above every damaged one, so readers (Spark's source
            # takes the newest) never land on a damaged file again.
            newest = manifest_versions(stream_dir)[-1][0]
            manifest._current = replace(current, version=newest + 1)
            await asyncio.to_thread(manifest._write, manifest._current)
            manifest.damage = damage
        return manifest

    @property
    def current(self) -> Manifest:
        return self._current

    async def update(self, change: Callable[[Manifest], Manifest]) -> Manifest:
        """Apply `change` to the current version and durably write the result as the next."""
        async with self._lock:
            changed = change(self._current)
            if changed == self._current:
                return self._current
            new = Manifest(
                version=self._current.version + 1,
                segments=changed.segments,
                start_offsets=changed.start_offsets,
                expired=changed.expired,
            )
            await asyncio.to_thread(self._write, new)
            self._current = new
            return new

    def _write(self, manifest: Manifest) -> None:
        make_dirs(self._dir)
        write_atomic(self._dir / manifest_file_name(manifest.version), manifest.to_json())
        for version, path in manifest_versions(self._stream_dir):
            if version <= manifest.version - KEEP_VERSIONS:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


def newest_readable(stream_dir: Path) -> tuple[Manifest, list[str]]:
    """The newest manifest version that reads, and what was wrong with newer ones (blocking)."""
    damage: list[str] = []
    for version, path in reversed(manifest_versions(stream_dir)):
        try:
            return Manifest.from_json(path.read_bytes(), str(path)), damage
        except FileNotFoundError:
            continue
        except ManifestError as exc:
            log.error("manifest version damaged", file=str(path), version=version, error=str(exc))
            damage.append(str(exc))
    return Manifest(), damage


def rewrite(stream_dir: Path, change: Callable[[Manifest], Manifest]) -> Manifest:
    """Apply `change` to the newest readable version and write the result as the next
    version, above any damaged one (blocking; `tamto storage repair`, node stopped)."""
    current, _ = newest_readable(stream_dir)
    versions = manifest_versions(stream_dir)
    newest = versions[-1][0] if versions else current.version
    new = replace(change(current), version=max(newest, current.version) + 1)
    StreamManifest(stream_dir, current)._write(new)
    return new
