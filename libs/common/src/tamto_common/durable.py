"""Writing files so they survive a crash or a power cut, and noticing the ones that did not.

Every file Tamto writes, other than the write-ahead log (which frames and
fsyncs its own appends), goes through `write_atomic`: a temporary sibling is
written and fsynced, renamed over the target, and the directory is fsynced, so
after a power cut at any moment the file holds either its old or its new
content, never a mix or nothing (a bare `write_text` can leave an empty file
behind: the data was still in the page cache when power went). `read_whole`
is the reading side for small state files: an empty file (a crash of an older
non-atomic writer, or a disk that lost it) is reported with the file's name
and what it is for, instead of being taken for a value.

All functions block: call them through a thread from async code.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class DamagedFile(Exception):
    """A state file is empty or unreadable; the message names it and what it holds."""

    def __init__(self, path: Path, what: str, problem: str) -> None:
        super().__init__(f"{what} {path} is {problem}")
        self.path = path
        self.what = what
        self.problem = problem


def fsync_dir(directory: Path) -> None:
    """Fsync a directory so entries created, renamed or removed in it are durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Fsync a file's data and size, through a descriptor of its own."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: Path, data: bytes | Callable[[BinaryIO], object], *, mode: int = 0o644
) -> None:
    """Replace `path` with `data` (bytes, or a function writing to the open file) so a
    crash leaves either the old or the new content.

    Write a temporary sibling (created with `mode`, so a private key is never
    readable by others, not even for a moment), fsync it, rename it over the
    target, fsync the directory.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
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


def read_whole(path: Path, what: str) -> bytes:
    """The content of the state file `path` (FileNotFoundError if it is missing).

    Raises `DamagedFile` if it is empty: `what` says what the file is for
    ("development credential", "signing key", ...), for the message.
    """
    data = path.read_bytes()
    if not data.strip():
        raise DamagedFile(path, what, "empty (a crash while it was written, or a damaged disk)")
    return data


def make_dirs(directory: Path, *, mode: int = 0o777) -> None:
    """Create `directory` and missing parents, fsyncing each parent whose entries changed."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for created in reversed(missing):
        with contextlib.suppress(FileExistsError):
            created.mkdir(mode=mode)
        fsync_dir(created.parent)
