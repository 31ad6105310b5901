"""The WAL when the disk fills mid-commit: the group is refused with
RESOURCE_EXHAUSTED, whatever part of it reached the file is cut off, and the next append
starts again at the durable end, on the open partition and after a restart alike."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from storage_testkit import OpenPartition, check_batch, make_batch, offsets_of, wal_files

from tamto_common.errors import ResourceExhausted
from tamto_storage import wal_commit as wal_module


async def test_a_commit_cut_short_by_a_full_disk_leaves_no_trace(
    load: OpenPartition, pdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partition = await load()
    await partition.open(1)
    assert await partition.append(1, [make_batch(0)]) == 3
    (path,) = wal_files(pdir)
    durable_size = path.stat().st_size

    real_pwrite_all = wal_module._pwrite_all

    def half_then_full(fd: int, buffers: Sequence[bytes | memoryview], position: int) -> int:
        # The first frame and half of the second reach the file, then the disk is full.
        data = b"".join(buffers)
        os.pwrite(fd, data[: len(data) // 2 + 50], position)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(wal_module, "_pwrite_all", half_then_full)
    with pytest.raises(ResourceExhausted, match=f"disk full writing {path}"):
        await partition.append(1, [make_batch(3), make_batch(6, pad=500)])
    assert path.stat().st_size == durable_size, "the refused frames are cut off"
    assert partition.offsets().next_offset == 3
    assert REGISTRY.get_sample_value("tamto_storage_disk_full") == 1
    assert offsets_of((await partition.read(0, 0, 1 << 30)).batches) == [0]

    monkeypatch.setattr(wal_module, "_pwrite_all", real_pwrite_all)
    # A shorter batch in the refused ones' place: no leftover of theirs may survive.
    assert await partition.append(1, [make_batch(3, count=1)]) == 4
    assert REGISTRY.get_sample_value("tamto_storage_disk_full") == 0
    await partition.close()

    reopened = await load()
    assert reopened.offsets().next_offset == 4
    result = await reopened.read(0, 0, 1 << 30)
    assert offsets_of(result.batches) == [0, 3]
    for batch in result.batches:
        check_batch(batch)
