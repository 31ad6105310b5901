"""A partition's subscription cursors, on every replica of its ledger (docs/cluster.md section 7).

A cursor (ack floor and acked ranges) is the subscription's position: losing it
redelivers everything since. On a single-node partition it lives on that node.
On a replicated one (R > 1) it is committed like an append: to every replica the
log appends to (`PartitionLog.replicas`), at once, done when the ack quorum Q
stored it; and it is read from R - Q + 1 of them (so at least one of them took
the last commit that succeeded), taking the most advanced. Commits always send
the whole cursor and storage merges it into what it holds, so a replica that
missed a commit is whole again after the next one, and cursors only move forward.

The exceptions move a cursor back or away: an admin seek stores the cursor with
`replace` and a delete removes it. Those must reach every replica that takes
appends (a replica that kept the old cursor would win the next load, being more
advanced, and merge it back into the others), so they fail unless all answered;
the operator retries them. Every router path reaches cursors through here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tamto_common.errors import TamtoError
from tamto_router.acks import AckSet, most_advanced
from tamto_router.partition_log import PartitionLog
from tamto_router.quorum import first_answers, no_quorum
from tamto_router.storage_client import StorageClient

T = TypeVar("T")


def _read_quorum(log: PartitionLog) -> int:
    """How many of the log's replicas a read asks: R - Q + 1 (of those there are)."""
    assert log.replicas is not None
    return max(1, min(len(log.replicas), len(log.ensemble) - log.quorum + 1))


async def get_cursor(log: PartitionLog, name: str) -> AckSet | None:
    """The subscription's cursor, None when it has none."""
    if log.replicas is None:
        return await log.storage.get_cursor(log.stream, log.partition, name)
    outcome = await first_answers(
        log.replicas,
        lambda client: client.get_cursor(log.stream, log.partition, name),
        _read_quorum(log),
    )
    found = [acks for acks in outcome.answers.values() if acks is not None]
    best = most_advanced(found)
    if best is not None:  # the counts only grow: the highest any replica holds
        best.redeliveries = max(acks.redeliveries for acks in found)
        best.dead_lettered = max(acks.dead_lettered for acks in found)
    return best


async def commit_cursor(log: PartitionLog, name: str, acks: AckSet, replace: bool = False) -> None:
    """Store `acks` as the subscription's cursor: merged into the stored one, or with
    `replace` (a seek) exactly them, on every replica (see the module docstring)."""
    if log.replicas is None:
        await log.storage.commit_cursor(
            log.stream, log.partition, name, log.epoch, acks, replace=replace
        )
        return

    async def commit(client: StorageClient) -> None:
        await client.commit_cursor(log.stream, log.partition, name, log.epoch, acks, replace)

    if replace:
        await _everywhere(log, commit)
    else:
        if len(log.replicas) < log.quorum:
            raise no_quorum(len(log.replicas), len(log.ensemble), log.quorum)
        await first_answers(log.replicas, commit, log.quorum)


async def list_cursors(log: PartitionLog) -> list[str]:
    """The names of the partition's cursors, sorted (those any replica asked holds)."""
    if log.replicas is None:
        return await log.storage.list_cursors(log.stream, log.partition)
    outcome = await first_answers(
        log.replicas,
        lambda client: client.list_cursors(log.stream, log.partition),
        _read_quorum(log),
    )
    return sorted({name for names in outcome.answers.values() for name in names})


async def delete_cursor(log: PartitionLog, name: str) -> bool:
    """Remove the subscription's cursor; whether one was there."""
    if log.replicas is None:
        return await log.storage.delete_cursor(log.stream, log.partition, name, log.epoch)
    deleted = await _everywhere(
        log, lambda client: client.delete_cursor(log.stream, log.partition, name, log.epoch)
    )
    return any(deleted)


async def _everywhere(log: PartitionLog, call: Callable[[StorageClient], Awaitable[T]]) -> list[T]:
    """`call` on every replica that takes appends; Unavailable unless all succeeded."""
    assert log.replicas is not None
    replicas = dict(log.replicas)
    results = await asyncio.gather(
        *(call(client) for client in replicas.values()), return_exceptions=True
    )
    failed = [r for r in results if isinstance(r, BaseException)]
    for error in failed:
        if not isinstance(error, TamtoError):
            raise error
    if failed or not replicas:
        raise no_quorum(len(replicas) - len(failed), len(log.ensemble), len(replicas))
    return [r for r in results if not isinstance(r, BaseException)]
