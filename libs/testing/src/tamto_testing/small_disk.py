"""A small filesystem for full-disk tests: a size-limited tmpfs the test mounts, grows and
unmounts itself (needs root, or CAP_SYS_ADMIN; `mount_tmpfs` says why not: the test skips,
or fails under CI=true, `tamto_testing.needs`)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tamto_testing.needs import missing


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of `size` (e.g. "3m") at `path`; why not, when it cannot be done."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tamto-small-disk", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode})"
    return None


def resize_tmpfs(path: Path, size: str) -> None:
    """Grow (or shrink) the tmpfs at `path`: space returns at once, files stay."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `path` for the block (the test skips, saying why, if mounting
    is impossible here; fails under CI=true); lazily unmounted after it."""
    reason = mount_tmpfs(path, size)
    if reason is not None:
        missing(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
