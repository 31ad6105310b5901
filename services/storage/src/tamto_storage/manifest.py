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
from pathlib import Path

from tamto_common.durable import make_dirs, write_atomic
from tamto_protocol.segment import MANIFEST_DIR, Manifest, manifest_file_name, manifest_versions
from tamto_protocol.segment import read_manifest as _read_manifest

KEEP_VERSIONS = 3


class StreamManifest:
    """The manifest of one stream on this node. Create with `StreamManifest.load`."""

    def __init__(self, stream_dir: Path, current: Manifest) -> None:
        self._dir = stream_dir / MANIFEST_DIR
        self._stream_dir = stream_dir
        self._current = current
        self._lock = asyncio.Lock()

    @classmethod
    async def load(cls, stream_dir: Path) -> StreamManifest:
        """The stream's newest manifest version (empty when it has none yet)."""
        return cls(stream_dir, await asyncio.to_thread(_read_manifest, stream_dir))

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
