"""A power-loss simulator for tests: a FUSE passthrough that forgets what was not fsynced.

Why: a kill -9 loses nothing the kernel already has, so it cannot show whether
a program fsyncs what it acknowledges, or the directory after a rename. A
power cut can, and this filesystem makes one on demand.

`PowerLossDisk(backing, mountpoint)` mounts a passthrough of `backing` at
`mountpoint` (libfuse 3 through mfusepy, in a child process). Programs see
every write at once, as they would through a page cache. Beside that the
filesystem keeps the *durable* image, the disk's content after a power cut:

- a file's data becomes durable on `fsync`/`fdatasync` of that file, as it is
  at that moment (written ranges are tracked, so a sync copies only them);
- a directory's entries (names and which file or directory each names)
  become durable on `fsync` of that directory, as a whole: a new file, a
  rename or an unlink is durable only after it. Metadata other than names
  and sizes (modes, times) is not modelled.

`cut()` is the power cut: it unmounts (every process using the mount must be
dead by then: `kill -9` it first) and replaces `backing` with the durable
image; `mount()` then brings it back. What a real disk may keep of unsynced
appends is drawn at random per file (seeded): nothing (most often), a prefix
(a torn write), or zeros (allocated blocks whose data never landed), so the
reader must tell torn and zero-filled tails from data.

Needs /dev/fuse, fusermount3 (Debian package fuse3) and mfusepy (a dev
dependency); `unavailable_reason()` says what is missing, for a skip.

This module is the test's side (mount, power off, cut); the filesystem itself
runs in the child process, `tamto_testing.power_loss_fs`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from tamto_common.polling import poll_blocking

_MOUNT_TIMEOUT_S = 20.0
_P = ParamSpec("_P")
_R = TypeVar("_R")


def unavailable_reason() -> str | None:
    """Why FUSE mounts cannot work here, or None when they can."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse in this environment"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (install the Debian package fuse3)"
    try:
        import mfusepy  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy cannot load libfuse: {exc}"
    return None


class PowerLossDisk:
    """Controls one simulated disk: `mount`, `cut` (power loss), `close`."""

    def __init__(self, backing: Path, mountpoint: Path, seed: int = 0) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self._rng = random.Random(seed)
        self._daemon: subprocess.Popen[bytes] | None = None
        self._log = backing.with_name(backing.name + ".fuse.log")
        #: Per cut, what the daemon reported (files torn, zero-filled, dropped bytes).
        self.cuts: list[dict[str, Any]] = []

    def mount(self) -> None:
        """Mount the passthrough and wait until it is serving."""
        assert self._daemon is None, "already mounted"
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with self._log.open("ab") as log:
            self._daemon = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tamto_testing.power_loss_fs",
                    str(self.backing),
                    str(self.mountpoint),
                    str(self._rng.randrange(1 << 32)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        daemon = self._daemon

        def mounted() -> bool:
            if daemon.poll() is not None:
                raise RuntimeError(f"the FUSE daemon exited with {daemon.returncode}")
            return os.path.ismount(self.mountpoint)

        try:
            poll_blocking(mounted, _MOUNT_TIMEOUT_S, "mounted", interval_s=0.01, error=RuntimeError)
        except RuntimeError as exc:
            self._daemon = None
            raise RuntimeError(f"FUSE mount failed ({exc}): {self._log_tail()}") from None

    def power_off(self) -> None:
        """The power fails at the next write, fsync or directory fsync (drawn at random, so
        a cut often falls between a write and its fsync): from then on every operation fails
        with EIO, as a dead disk's would. Kill the processes using the mount, then `cut`."""
        assert self._daemon is not None, "not mounted"
        self._daemon.send_signal(signal.SIGUSR1)

    def cut(self) -> dict[str, Any]:
        """Cut the power: unmount and keep only what was durable. Returns the daemon's report."""
        report = self._unmount()
        self.cuts.append(report)
        return report

    def close(self) -> None:
        """Unmount if mounted (a cut like any other)."""
        if self._daemon is not None:
            self._unmount()

    def __enter__(self) -> PowerLossDisk:
        self.mount()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unmount(self) -> dict[str, Any]:
        daemon = self._daemon
        assert daemon is not None, "not mounted"
        refusals: list[bytes] = []

        def unmounted() -> bool:
            done = subprocess.run(
                ["fusermount3", "-u", str(self.mountpoint)], capture_output=True, check=False
            )
            refusals.append(done.stderr)
            return done.returncode == 0

        try:
            poll_blocking(unmounted, _MOUNT_TIMEOUT_S, "unmounted", error=RuntimeError)
        except RuntimeError:  # still busy: a process still holds files
            raise RuntimeError(
                f"could not unmount {self.mountpoint}: {refusals[-1]!r}; "
                f"processes using it: {users(self.mountpoint)}"
            ) from None
        try:
            daemon.wait(_MOUNT_TIMEOUT_S)
        finally:
            self._daemon = None
        if daemon.returncode != 0:
            raise RuntimeError(f"FUSE daemon failed ({daemon.returncode}): {self._log_tail()}")
        report_path = self.backing.with_name(self.backing.name + ".cut.json")
        report: dict[str, Any] = json.loads(report_path.read_text())
        return report

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self._log.read_text(errors="replace")[-2000:]
        return ""


def users(mountpoint: Path) -> list[str]:
    """The processes with a file or working directory under `mountpoint` (pid and command)."""
    found = []
    prefix = str(mountpoint)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = [os.readlink(f"/proc/{pid}/cwd")]
            links += [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            if any(link.startswith(prefix) for link in links):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                found.append(f"{pid}: {cmd.decode(errors='replace')[:200]}")
        except OSError:
            continue
    return found
