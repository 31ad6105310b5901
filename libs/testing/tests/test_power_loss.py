"""The power-loss simulator keeps exactly what was fsynced: file data on fsync of the file,
names on fsync of their directory; everything else is gone after `cut`."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tamto_common.durable import fsync_dir, fsync_file, write_atomic
from tamto_testing.needs import needs
from tamto_testing.power_loss import PowerLossDisk, unavailable_reason

pytestmark = needs(unavailable_reason())


def test_only_synced_data_and_synced_names_survive_a_cut(tmp_path: Path) -> None:
    disk = PowerLossDisk(tmp_path / "backing", tmp_path / "mnt", seed=3)
    mnt = disk.mountpoint
    with disk:
        (mnt / "dir").mkdir()
        fsync_dir(mnt)
        with (mnt / "dir" / "log").open("wb") as f:
            f.write(b"synced")
            f.flush()
            os.fsync(f.fileno())
            f.write(b"-unsynced")
        fsync_dir(mnt / "dir")
        write_atomic(mnt / "dir" / "state.json", b"{}")
        os.link(mnt / "dir" / "state.json", mnt / "dir" / "linked.json")  # as carry.promote
        fsync_dir(mnt / "dir")
        (mnt / "dir" / "unnamed").write_bytes(b"its data, never its name")
        fsync_file(mnt / "dir" / "unnamed")  # data durable, directory entry not
        (mnt / "volatile").write_bytes(b"gone")
        report = disk.cut()
        disk.mount()
        names = sorted(p.name for p in (mnt / "dir").iterdir())
        assert names == ["linked.json", "log", "state.json"]
        log = (mnt / "dir" / "log").read_bytes()
        # A real disk may keep part of the unsynced append, torn or as zeros: never more.
        assert log.startswith(b"synced")
        assert len(log) <= len(b"synced-unsynced") or set(log[6:]) == {0}
        assert (mnt / "dir" / "state.json").read_bytes() == b"{}"
        assert (mnt / "dir" / "linked.json").read_bytes() == b"{}"
        assert not (mnt / "volatile").exists()
        assert report["files"] == 3


def test_after_power_off_the_disk_fails_every_write_with_eio(tmp_path: Path) -> None:
    disk = PowerLossDisk(tmp_path / "backing", tmp_path / "mnt")
    with disk:
        fd = os.open(disk.mountpoint / "f", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)
            disk.power_off()
            with pytest.raises(OSError, match=r"Input/output") as failed:  # noqa: PT012
                for _ in range(4):
                    os.write(fd, b"x")
                    os.fsync(fd)
            assert failed.value.errno == errno.EIO
        finally:
            os.close(fd)
