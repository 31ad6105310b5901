"""The power-loss simulator's filesystem: the FUSE daemon `PowerLossDisk` runs.

Runs as `python -m tamto_testing.power_loss_fs BACKING MOUNTPOINT SEED`, in a
child process of the test (`tamto_testing.power_loss`, which mounts, powers off
and cuts). Split from it because the two sides share no code and run in
different processes: this one is the FUSE passthrough that tracks what is
durable (a file's synced ranges, a directory's synced entries) and, once
unmounted, writes the durable image, with random torn or zero-filled tails,
in place of the backing directory.
"""

from __future__ import annotations

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

_P = ParamSpec("_P")
_R = TypeVar("_R")

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
    from mfusepy import FuseOSError  # type: ignore[import-untyped]

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
