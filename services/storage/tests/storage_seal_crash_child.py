"""Child process for the sealing crash test: append, then seal and stop dead at one step.

Usage: python storage_seal_crash_child.py <data-dir> <stage>

Appends BATCHES batches to ``orders/0`` through a `PartitionStore`, printing
``acked <next-offset>`` once all are durable, then seals. The step named by
`stage` is replaced by one that prints ``blocked <stage>`` and never returns,
so the parent can SIGKILL the process at exactly that point of sealing:

- ``before-rename``: the segment's temporary file is written and fsynced, not renamed;
- ``before-manifest``: the segment is renamed into place, the manifest not yet written;
- ``before-trim``: the manifest records the segment, the covered WAL files are still there.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any

from storage_testkit import make_batch

import tamto_storage.partition
from tamto_storage.manifest import StreamManifest
from tamto_storage.sealer import SealOptions
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions

BATCHES = 40
COUNT = 3


def block(stage: str) -> None:
    sys.stdout.write(f"blocked {stage}\n")
    sys.stdout.flush()
    threading.Event().wait()  # until SIGKILL


def install(stage: str) -> None:
    if stage == "before-rename":
        real_replace = os.replace

        def replace(src: Any, dst: Any) -> None:
            if Path(src).name.startswith(".segment-"):
                block(stage)
            real_replace(src, dst)

        os.replace = replace  # type: ignore[assignment]
    elif stage == "before-manifest":
        real_write = StreamManifest._write

        def write(self: StreamManifest, manifest: Any) -> None:
            if manifest.segments:
                block(stage)
            real_write(self, manifest)

        StreamManifest._write = write  # type: ignore[method-assign]
    elif stage == "before-trim":

        def remove(paths: Any) -> None:
            block(stage)

        tamto_storage.partition.remove_files = remove
    else:
        raise SystemExit(f"unknown stage {stage}")


async def main(data_dir: Path, stage: str) -> None:
    store = PartitionStore(
        data_dir, WalOptions(file_bytes=2000), seal_options=SealOptions(segment_bytes=4000)
    )
    partition = await store.get("orders", 0)
    await partition.open(1)
    for i in range(BATCHES):
        await partition.append(1, [make_batch(i * COUNT, COUNT)])
    sys.stdout.write(f"acked {BATCHES * COUNT}\n")
    sys.stdout.flush()
    install(stage)
    sealer = store.sealer
    assert sealer is not None
    await sealer.seal_all()
    raise SystemExit("sealing finished without reaching the stage")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
