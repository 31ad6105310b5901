"""Atomic state files: whole old or whole new content, private modes, empty files refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

import pytest

from tamto_common.durable import DamagedFile, make_dirs, read_whole, write_atomic


def test_write_atomic_replaces_the_whole_file_with_the_given_mode(tmp_path: Path) -> None:
    path = tmp_path / "key.pem"
    path.write_bytes(b"old content that is longer than the new one")
    write_atomic(path, b"new", mode=0o600)
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["key.pem"]  # no temporary left


def test_a_failing_writer_leaves_the_old_content_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "cursor.json"
    path.write_bytes(b"old")

    def half_then_fail(f: BinaryIO) -> None:
        f.write(b"half of the new")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, half_then_fail)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["cursor.json"]


def test_read_whole_names_an_empty_file_and_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "dev-credential"
    path.write_bytes(b"\n")
    with pytest.raises(DamagedFile, match=r"development credential .*dev-credential is empty"):
        read_whole(path, "development credential")
    path.write_bytes(b"tamto_x\n")
    assert read_whole(path, "development credential") == b"tamto_x\n"
    with pytest.raises(FileNotFoundError):
        read_whole(tmp_path / "missing", "anything")


def test_make_dirs_creates_missing_parents_with_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    make_dirs(target, mode=0o700)
    assert target.is_dir()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700
    make_dirs(target)  # already there: nothing to do
