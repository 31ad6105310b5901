"""Crash durability: SIGKILL a writer mid-stream; every batch it acked must be readable."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from storage_testkit import check_batch

from tamto_storage.model import PartitionId
from tamto_storage.partition import Partition
from tamto_storage.wal import WalOptions

WRITER = Path(__file__).with_name("storage_crash_writer.py")
ACKS_BEFORE_KILL = 40
DEADLINE_S = 60.0


async def read_acks(stream: asyncio.StreamReader, acked: list[int], want: int | None) -> None:
    """Collect `acked <n>` lines until `want` are seen (None: until end of output)."""
    while want is None or len(acked) < want:
        line = await stream.readline()
        if not line:
            return
        if line.startswith(b"acked "):
            acked.append(int(line.split()[1]))


async def test_acked_batches_survive_sigkill(tmp_path: Path) -> None:
    directory = tmp_path / "partition=0"
    with (tmp_path / "writer.err").open("wb") as stderr:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WRITER),
            str(directory),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(WRITER.parent)},
        )
    assert child.stdout is not None
    acked: list[int] = []
    try:
        await asyncio.wait_for(read_acks(child.stdout, acked, ACKS_BEFORE_KILL), DEADLINE_S)
    finally:
        child.send_signal(signal.SIGKILL)
        # Lines printed before the kill are acks too.
        await asyncio.wait_for(read_acks(child.stdout, acked, None), DEADLINE_S)
        await child.wait()
    assert child.returncode == -signal.SIGKILL
    assert len(acked) >= ACKS_BEFORE_KILL, (tmp_path / "writer.err").read_text()

    partition = await Partition.load(PartitionId("crash", 0), directory, WalOptions())
    try:
        assert partition.offsets().next_offset > max(acked)
        result = await partition.read(0, 0, 1 << 30)
        by_base = {b.base_offset: b for b in result.batches}
        for base in acked:
            check_batch(by_base[base])
        # Nothing is missing in between either: the log is contiguous from 0.
        assert sorted(by_base) == list(range(0, partition.offsets().next_offset, 3))
    finally:
        await partition.close()
