"""Child process for the crash test: append forever, print each acked base offset.

Usage: python storage_crash_writer.py <partition-dir>
Keeps several appends in flight (so group commits are shared) and prints
``acked <base-offset>`` only after `Partition.append` returned for that batch.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from storage_testkit import make_batch

from tamto_storage.model import PartitionId
from tamto_storage.partition import Partition
from tamto_storage.wal import WalOptions

COUNT = 3
IN_FLIGHT = 4


async def append_forever(directory: Path) -> None:
    partition = await Partition.load(PartitionId("crash", 0), directory, WalOptions())
    offsets = await partition.open(1)
    next_base = offsets.next_offset

    async def append_one(base: int) -> None:
        await partition.append(1, [make_batch(base, COUNT)])
        sys.stdout.write(f"acked {base}\n")
        sys.stdout.flush()

    in_flight: set[asyncio.Task[None]] = set()
    while True:
        while len(in_flight) < IN_FLIGHT:
            in_flight.add(asyncio.create_task(append_one(next_base)))
            next_base += COUNT
        done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()


if __name__ == "__main__":
    asyncio.run(append_forever(Path(sys.argv[1])))
