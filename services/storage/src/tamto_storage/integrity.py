"""Checking segment bytes at rest: the whole-file digest, and what a node knows is damaged.

WAL frames carry a CRC each (`tamto_storage.frame`); a Parquet segment carries
two kinds of check. Every data page has Parquet's own CRC (written with
``write_page_checksum``, verified on every decode with
``page_checksum_verification``), and the whole file has a digest,
``crc32:<8 hex>`` (zlib's CRC-32 through ISA-L, as the WAL's), computed while
the file is written and recorded in the manifest entry. Page CRCs do not cover
page headers, the footer or anything a reader skips, so the digest is checked
once per file and process before the file is first served (`VerifiedFiles`):
18-30 ms for a 31 MiB segment from the page cache on the (busy) build machine,
against the 100-150 ms a whole decode of that file takes (docs/segments.md,
Integrity, has the measurements). A file that fails either check is
damaged as a whole: its offset range is answered with DATA_LOSS naming the file
and the range (`damaged_offsets_error`), the other segments and the WAL keep
serving, and `tamto storage verify` / `repair` deal with it (docs/segments.md).

Blocking functions: call through a thread.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import BinaryIO

from isal.isal_zlib import crc32

from tamto_protocol.segment import DIGEST_PREFIX

_CHUNK = 1 << 20


def format_digest(crc: int) -> str:
    return f"{DIGEST_PREFIX}{crc & 0xFFFFFFFF:08x}"


class DigestingSink:
    """A binary file wrapper that digests every byte written through it (for the
    Parquet writer, so the digest costs no second pass over the file)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._crc = 0

    def write(self, data: bytes) -> int:
        self._crc = crc32(data, self._crc)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    @property
    def closed(self) -> bool:
        return self._f.closed

    @property
    def digest(self) -> str:
        return format_digest(self._crc)


def file_digest(path: Path) -> str:
    """The digest of a whole file, read in 1 MiB chunks."""
    crc = 0
    with path.open("rb", buffering=0) as f:
        while chunk := f.read(_CHUNK):
            crc = crc32(chunk, crc)
    return format_digest(crc)


def file_identity(path: Path) -> tuple[int, int, int, int]:
    """(device, inode, size, mtime): changes when the file is replaced or rewritten."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class VerifiedFiles:
    """The files whose digest this process already checked, by identity.

    Keyed by identity rather than name: a promoted rewrite replaces a file
    under the same name. Shared by reading threads, hence the lock.
    """

    def __init__(self) -> None:
        self._ok: set[tuple[int, int, int, int]] = set()
        self._lock = threading.Lock()

    def check(self, path: Path, expected: str) -> str | None:
        """None when `path` matches `expected` (or no digest was recorded), else what is wrong."""
        if not expected:
            return None
        identity = file_identity(path)
        with self._lock:
            if identity in self._ok:
                return None
        actual = file_digest(path)
        if actual != expected:
            return f"file digest {actual} differs from the manifest's {expected}"
        with self._lock:
            self._ok.add(identity)
        return None
