"""kill -9 while sealing: no partial segment is ever visible, nothing is lost or doubled."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tamto_protocol.segment import parse_segment_name, read_manifest
from tamto_storage.sealer import SealOptions
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions

CHILD = Path(__file__).with_name("storage_seal_crash_child.py")
DEADLINE_S = 60.0


def visible_offsets(stream_dir: Path) -> list[int]:
    """Offsets a plain Parquet reader sees: every listed file, '.'/'_' names skipped as Spark does."""
    dataset = ds.dataset(stream_dir, format="parquet", partitioning="hive")
    if not dataset.files:
        return []
    return sorted(dataset.to_table(columns=["offset"]).column("offset").to_pylist())


def check_segments_whole(partition_dir: Path) -> None:
    for path in partition_dir.iterdir():
        named = parse_segment_name(path.name)
        if named is not None:
            first, last = named
            table = pq.read_table(path)
            assert table.column("offset").to_pylist() == list(range(first, last + 1)), path


@pytest.mark.parametrize("stage", ["before-rename", "before-manifest", "before-trim"])
async def test_kill9_during_sealing_leaves_every_acked_message_exactly_once(
    tmp_path: Path, stage: str
) -> None:
    data = tmp_path / "data"
    with (tmp_path / "child.err").open("wb") as stderr:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            str(data),
            stage,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(CHILD.parent)},
        )
    assert child.stdout is not None
    lines: list[str] = []
    try:
        while not lines or not lines[-1].startswith("blocked"):
            line = await asyncio.wait_for(child.stdout.readline(), DEADLINE_S)
            assert line, (tmp_path / "child.err").read_text()
            lines.append(line.decode().strip())
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL
    acked_end = int(next(x for x in lines if x.startswith("acked")).split()[1])
    assert lines[-1] == f"blocked {stage}"

    stream_dir = data / "streams" / "orders"
    pdir = stream_dir / "partition=0"
    # Right after the crash: what a reader lists is whole and never overlaps.
    check_segments_whole(pdir)
    seen = visible_offsets(stream_dir)
    assert seen == sorted(set(seen)), "no offset twice"
    assert seen == list(range(len(seen))), "a prefix of the log, no gaps"
    if stage == "before-rename":
        assert any(p.name.startswith(".segment-") for p in pdir.iterdir()), "the crash hit mid-seal"

    # Restart: recovery records what was renamed, sealing resumes where the segments end.
    store = PartitionStore(data, WalOptions(file_bytes=2000), seal_options=SealOptions())
    try:
        partition = await store.get("orders", 0)
        assert partition.offsets().next_offset == acked_end
        sealer = store.sealer
        assert sealer is not None
        await sealer.seal_all()
        offsets = []
        offset = 0
        while offset < acked_end:
            result = await partition.read(offset, 0, 1 << 20)
            offsets += [o for b in result.batches for o in range(b.base_offset, b.end_offset)]
            offset = result.next_offset
        assert offsets == list(range(acked_end))
    finally:
        await store.close()
    assert not any(p.name.startswith(".") for p in pdir.iterdir()), "temporary files cleaned"
    check_segments_whole(pdir)
    assert visible_offsets(stream_dir) == list(range(acked_end))
    manifest = read_manifest(stream_dir)
    on_disk = sorted(p.name for p in pdir.iterdir() if parse_segment_name(p.name))
    assert sorted(s.file.split("/")[1] for s in manifest.segments) == on_disk
