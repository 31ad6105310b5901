"""Small helpers that make file changes survive a crash (blocking: call via a thread)."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def fsync_dir(directory: Path) -> None:
    """Fsync a directory so entries created, renamed or removed in it are durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes | Callable[[BinaryIO], object]) -> None:
    """Replace `path` with `data` (bytes, or a function writing to the open file) so a
    crash leaves either the old or the new content.

    Write a temporary sibling, fsync it, rename over the target, fsync the directory.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with tmp.open("wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                data(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def make_dirs(directory: Path) -> None:
    """Create `directory` and missing parents, fsyncing each parent whose entries changed."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for created in reversed(missing):
        with contextlib.suppress(FileExistsError):
            created.mkdir()
        fsync_dir(created.parent)
