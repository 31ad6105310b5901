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
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
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
                    "tamto_testing.power_loss",
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


# --- the daemon: runs as `python -m tamto_testing.power_loss BACKING MOUNTPOINT SEED` ---

_FILE, _DIR = "f", "d"


class _PowerLossFs:
    """The FUSE operations (single-threaded: libfuse's -s). Paths are relative to backing."""

    use_ns = True

    def __init__(self, backing: Path, state: Path, seed: int) -> None:
        self.backing = backing
        self.state = state  # durable file contents: state/<id>
        self.rng = random.Random(seed)
        self.next_id = 1
        self.by_ino: dict[int, int] = {}  # backing inode -> node id (files and dirs)
        self.root_id = self._fresh(os.lstat(backing).st_ino)
        #: The durable entries of each directory node: name -> (kind, node id).
        self.durable_dirs: dict[int, dict[str, tuple[str, int]]] = {}
        #: Written, not yet synced byte ranges of each file node, [start, end); a
        #: truncate is an empty range, so the next sync takes the new size.
        self.dirty: dict[int, list[tuple[int, int]]] = {}
        self.fh_node: dict[int, int] = {}
        #: After `power_off`: the kind of operation the power fails at; then failed.
        self.fail_at: str | None = None
        self.failed = False
        self._adopt(backing, self.root_id)

    def power_off(self, *_: object) -> None:
        """SIGUSR1: the power fails at the next operation of a kind drawn now."""
        self.fail_at = self.rng.choice(("write", "fsync", "fsyncdir", "any"))

    def _powered(self, op: str) -> None:
        """Raise EIO once the power has failed; `op` is about to run."""
        if self.fail_at is not None and self.fail_at in (op, "any"):
            self.failed = True
        if self.failed:
            raise _fuse_error(OSError(errno.EIO, "the power is off"))

    # -- bookkeeping --

    def _fresh(self, ino: int) -> int:
        node = self.next_id
        self.next_id += 1
        self.by_ino[ino] = node
        return node

    def _node(self, ino: int) -> int:
        found = self.by_ino.get(ino)
        return found if found is not None else self._fresh(ino)

    def _adopt(self, directory: Path, node: int) -> None:
        """Everything present at mount time is durable (it is what the last cut left)."""
        entries: dict[str, tuple[str, int]] = {}
        for child in os.scandir(directory):
            st = child.stat(follow_symlinks=False)
            child_node = self._fresh(st.st_ino)
            if stat.S_ISDIR(st.st_mode):
                entries[child.name] = (_DIR, child_node)
                self._adopt(Path(child.path), child_node)
            elif stat.S_ISREG(st.st_mode):
                entries[child.name] = (_FILE, child_node)
                shutil.copyfile(child.path, self.state / str(child_node))
        self.durable_dirs[node] = entries

    def _full(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _mark(self, node: int, start: int, end: int) -> None:
        ranges = self.dirty.setdefault(node, [])
        if ranges and ranges[-1][1] == start:
            ranges[-1] = (ranges[-1][0], end)
        else:
            ranges.append((start, end))

    def _sync_file(self, node: int, fd: int) -> None:
        size = os.fstat(fd).st_size
        durable = self.state / str(node)
        with open(durable, "ab") as out:  # create if missing, keep what is there
            pass
        with open(durable, "r+b") as out:
            for start, end in self.dirty.pop(node, []):
                start, end = min(start, size), min(end, size)
                if end > start:
                    out.seek(start)
                    out.write(os.pread(fd, end - start, start))
            out.truncate(size)

    # -- operations --

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        try:
            st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
        except OSError as exc:
            raise _fuse_error(exc) from None
        keys = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid")
        attrs: dict[str, Any] = {k: getattr(st, k) for k in keys}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._full(path))]

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._full(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
        return {k: getattr(sv, k) for k in (*keys, "f_flag", "f_frsize", "f_namemax")}

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._full(path), amode):
            raise _fuse_error(OSError(errno.EACCES, "access"))
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._powered("")
        full = self._full(path)
        _call(os.mkdir, full, mode)
        self._fresh(os.lstat(full).st_ino)
        return 0

    def rmdir(self, path: str) -> int:
        self._powered("")
        _call(os.rmdir, self._full(path))
        return 0

    def unlink(self, path: str) -> int:
        self._powered("")
        _call(os.unlink, self._full(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        self._powered("")
        _call(os.rename, self._full(old), self._full(new))
        return 0

    def link(self, target: str, source: str) -> int:
        """A hard link `target` to the existing `source`: one node, two names (after a cut
        the durable image holds two copies, with the same content)."""
        self._powered("")
        _call(os.link, self._full(source), self._full(target))
        return 0

    def chmod(self, path: str, mode: int) -> int:
        _call(os.chmod, self._full(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        _call(os.chown, self._full(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            _call(os.utime, self._full(path))
        else:
            _call(os.utime, self._full(path), ns=times)
        return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        self._powered("")
        full = self._full(path)
        existed = os.path.lexists(full)
        fd = _call(os.open, full, os.O_RDWR | os.O_CREAT, mode)
        ino = os.fstat(fd).st_ino
        self.fh_node[fd] = self._node(ino) if existed else self._fresh(ino)
        return fd

    def open(self, path: str, flags: int) -> int:
        self._powered("")
        # Read-write underneath whatever the caller asked: a sync reads back what was written.
        access = os.O_RDONLY | os.O_WRONLY | os.O_RDWR
        fd = _call(os.open, self._full(path), (flags & ~(os.O_APPEND | access)) | os.O_RDWR)
        node = self._node(os.fstat(fd).st_ino)
        self.fh_node[fd] = node
        if flags & os.O_TRUNC:
            self._mark(node, 0, 0)
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._powered("")
        return _call(os.pread, fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self._powered("")
        written = _call(os.pwrite, fh, data, offset)
        self._mark(self.fh_node[fh], offset, offset + written)
        self._powered("write")  # failing here: written, in the cache, never synced
        return written

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        self._powered("")
        if fh is not None:
            _call(os.ftruncate, fh, length)
            node = self.fh_node[fh]
        else:
            full = self._full(path)
            _call(os.truncate, full, length)
            node = self._node(os.lstat(full).st_ino)
        self._mark(node, length, length)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        self.fh_node.pop(fh, None)
        os.close(fh)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._powered("fsync")
        self._sync_file(self.fh_node[fh], fh)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        self._powered("fsyncdir")
        full = self._full(path)
        node = self._node(os.lstat(full).st_ino)
        entries: dict[str, tuple[str, int]] = {}
        for child in os.scandir(full):
            st = child.stat(follow_symlinks=False)
            kind = _DIR if stat.S_ISDIR(st.st_mode) else _FILE
            entries[child.name] = (kind, self._node(st.st_ino))
        self.durable_dirs[node] = entries
        return 0

    # -- the cut --

    def materialize(self, target: Path) -> dict[str, Any]:
        """Write the durable image to `target`, with random torn or zero tails where
        unsynced appends existed. Returns what it did, for the test's log."""
        volatile = self._volatile_paths()
        report: dict[str, Any] = {"files": 0, "torn": [], "zeroed": [], "dropped_bytes": 0}
        self._write_dir(self.root_id, target, volatile, report)
        return report

    def _volatile_paths(self) -> dict[int, str]:
        found: dict[int, str] = {}
        for root, _dirs, files in os.walk(self.backing):
            for name in files:
                path = os.path.join(root, name)
                found.setdefault(self._node(os.lstat(path).st_ino), path)
        return found

    def _write_dir(
        self, node: int, target: Path, volatile: dict[int, str], report: dict[str, Any]
    ) -> None:
        target.mkdir()
        for name, (kind, child) in self.durable_dirs.get(node, {}).items():
            if kind == _DIR:
                self._write_dir(child, target / name, volatile, report)
                continue
            report["files"] += 1
            durable = self.state / str(child)
            data = durable.read_bytes() if durable.exists() else b""
            current = volatile.get(child)
            if self.dirty.get(child) and current is not None:
                data = self._tail(data, Path(current), target / name, report)
            (target / name).write_bytes(data)

    def _tail(self, data: bytes, current: Path, name: Path, report: dict[str, Any]) -> bytes:
        """What a real disk might keep of unsynced appends past the durable size."""
        extra = current.read_bytes()[len(data) :]
        report["dropped_bytes"] += len(extra)
        if not extra:
            return data
        draw = self.rng.random()
        if draw < 0.2:
            keep = self.rng.randrange(1, len(extra) + 1)
            report["torn"].append(str(name))
            report["dropped_bytes"] -= keep
            return data + extra[:keep]
        if draw < 0.4:
            report["zeroed"].append(str(name))
            return data + bytes(self.rng.randrange(1, min(len(extra), 8192) + 1))
        return data


def _fuse_error(exc: OSError) -> Exception:
    from mfusepy import FuseOSError

    error: Exception = FuseOSError(exc.errno or errno.EIO)
    return error


def _call(function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    try:
        return function(*args, **kwargs)
    except OSError as exc:
        raise _fuse_error(exc) from None


def _unmount_when_orphaned(mountpoint: Path) -> None:
    """A test killed before it could unmount must not leave the mount behind."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)


def _main(backing: Path, mountpoint: Path, seed: int) -> None:
    from mfusepy import FUSE

    state = backing.with_name(backing.name + ".durable")
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir()
    fs = _PowerLossFs(backing, state, seed)
    signal.signal(signal.SIGUSR1, fs.power_off)
    threading.Thread(target=_unmount_when_orphaned, args=(mountpoint,), daemon=True).start()
    # Foreground, single-threaded; no kernel attribute caching, so sizes are never stale.
    FUSE(
        fs,
        str(mountpoint),
        foreground=True,
        nothreads=True,
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
    )
    # Unmounted: the power is gone. Only the durable image remains.
    image = backing.with_name(backing.name + ".image")
    shutil.rmtree(image, ignore_errors=True)
    report = fs.materialize(image)
    old = backing.with_name(backing.name + ".old")
    os.rename(backing, old)
    os.rename(image, backing)
    shutil.rmtree(old)
    shutil.rmtree(state)
    backing.with_name(backing.name + ".cut.json").write_text(json.dumps(report))


if __name__ == "__main__":
    _main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
