"""A replica that rejoins a replicated log gets the cursors the others hold.

Cursor commits go to the replicas that take appends (`tamto_router.cursors`); one
that is out (down, being caught up, or a spare being filled by re-replication) misses
them, and a seek back or a delete done meanwhile. Copying entries alone left it with
no cursor (a spare) or an old one until the subscription's next commit, and an old
cursor more advanced than a seek back would win the next owner's load (it takes the
most advanced) and undo the seek. So before the log lets a caught-up replica take
appends again (`PartitionLog._admit_joiners`), its cursors are made those of the
replicas that take appends: each the most advanced among them, stored with
`replace`, and none they do not hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from tamto_router.acks import most_advanced
from tamto_router.storage_client import StorageClient


async def sync_cursors(
    stream: str,
    partition: int,
    epoch: int,
    sources: Mapping[str, StorageClient],
    joiner: StorageClient,
) -> int:
    """Make `joiner`'s cursors of the partition those `sources` hold; how many it got.
    Any failure raises (the replica is then not admitted, and tried again later)."""
    clients = list(sources.values())
    lists = await asyncio.gather(*(c.list_cursors(stream, partition) for c in clients))
    names = sorted({name for names in lists for name in names})
    for name in names:
        values = await asyncio.gather(*(c.get_cursor(stream, partition, name) for c in clients))
        best = most_advanced(v for v in values if v is not None)
        if best is not None:
            await joiner.commit_cursor(stream, partition, name, epoch, best, replace=True)
    for name in sorted(set(await joiner.list_cursors(stream, partition)) - set(names)):
        await joiner.delete_cursor(stream, partition, name, epoch)
    return len(names)
