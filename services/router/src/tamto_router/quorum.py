"""Quorum writes and fences over a ledger's replicas (docs/cluster.md sections 2 and 3).

A ledger is held by an ensemble of R storage nodes; an entry is acknowledged once
Q of them have it fsynced, and a new owner's recovery fences the previous ledger
and learns its end from R - Q + 1 of them (enough that one of them has every
entry that was ever acknowledged), then copies the entries some of them lack.
This module is those waits and that copy (also how a replica that missed appends
is caught up, `copy_entries`, after `agreed_end` found where it stops holding the
log's entries), over `StorageClient`s; it knows nothing of etcd or of the ledger
record.

Used by the router for streams with replication factor R > 1: the partition
log's appends (`first_answers`) and the claim's recovery (`recover_ledger_end`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from tamto_common.errors import TamtoError, Unavailable
from tamto_protocol.batch import decode_batch
from tamto_router.model import Batch
from tamto_router.storage_client import StorageClient

T = TypeVar("T")


def no_quorum(reachable: int, replicas: int, needed: int) -> Unavailable:
    """The one wording of a quorum that cannot be reached."""
    return Unavailable(f"no quorum: {reachable} of {replicas} replicas reachable, {needed} needed")


@dataclass(frozen=True)
class QuorumOutcome(Generic[T]):
    """What the replicas that answered in time said (by storage node), and why the
    others failed (those that failed before the quorum was reached)."""

    answers: Mapping[str, T]
    failures: Mapping[str, TamtoError]


async def first_answers(
    replicas: Mapping[str, StorageClient],
    call: Callable[[StorageClient], Awaitable[T]],
    needed: int,
) -> QuorumOutcome[T]:
    """Call every replica at once and return as soon as `needed` of them answered.

    Raises `no_quorum` as soon as so many failed that `needed` answers are out of
    reach. Calls still running when it returns go on in the background (an
    append reaches the slow replicas too) and their outcome is dropped.
    """
    if not 1 <= needed <= len(replicas):
        raise ValueError(f"needed {needed} must be between 1 and {len(replicas)}")
    tasks = {asyncio.ensure_future(call(client)): node for node, client in replicas.items()}
    answers: dict[str, T] = {}
    failures: dict[str, TamtoError] = {}
    pending = set(tasks)
    try:
        while len(answers) < needed:
            if len(replicas) - len(failures) < needed:
                raise no_quorum(len(replicas) - len(failures), len(replicas), needed)
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.exception()
                if error is None:
                    answers[tasks[task]] = task.result()
                elif isinstance(error, TamtoError):
                    failures[tasks[task]] = error
                else:
                    raise error
    finally:
        for task in pending:  # keep running; retrieve the outcome so none is "never retrieved"
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return QuorumOutcome(answers, failures)


async def append_quorum(
    replicas: Mapping[str, StorageClient],
    quorum: int,
    stream: str,
    partition: int,
    epoch: int,
    batches: list[Batch],
) -> int:
    """Append `batches` to every replica at once (each on its own pipelined append
    stream); the next offset once `quorum` replicas have them fsynced."""
    outcome = await first_answers(
        replicas, lambda client: client.append(stream, partition, epoch, batches), quorum
    )
    return max(outcome.answers.values())


async def fence_quorum(
    replicas: Mapping[str, StorageClient],
    quorum: int,
    stream: str,
    partition: int,
    epoch: int,
    ensemble_size: int | None = None,
) -> QuorumOutcome[int]:
    """Fence a ledger on its replicas for `epoch`; returns once R - Q + 1 of them
    answered with their last offset. The highest of those is the ledger's end: at
    least one of them holds every entry that Q replicas acknowledged.

    R is `ensemble_size` when `replicas` are only the reachable members of the
    ensemble (a dead member still counts in R: fewer answers would not be safe)."""
    needed = (ensemble_size or len(replicas)) - quorum + 1
    if needed > len(replicas):
        raise no_quorum(len(replicas), ensemble_size or len(replicas), needed)
    return await first_answers(
        replicas, lambda client: client.fence_ledger(stream, partition, epoch), needed
    )


@dataclass(frozen=True)
class Recovery:
    """A new owner's recovery of the previous ledger: its last offset, what the
    fenced replicas answered, and the responders whose log is not the source's
    below their own end (`_holds_source_log`): nothing was copied to them; the
    log's catch-up (`tamto_router.replica_catch_up`) cuts their stale tail first."""

    end: int
    fenced: QuorumOutcome[int]
    diverged: frozenset[str]
    source: str

    async def holding_log(
        self, at_end: Mapping[str, StorageClient], stream: str, partition: int
    ) -> dict[str, StorageClient]:
        """Those of `at_end` (replicas ending at `end`) that answered the fence, or whose
        log is the source's: one that did not answer may end there with a stale tail."""
        source = at_end.get(self.source)
        return {
            node: client
            for node, client in at_end.items()
            if node in self.fenced.answers
            or (
                source is not None
                and await _holds_source_log(source, client, stream, partition, self.end + 1)
            )
        }


async def recover_ledger_end(
    replicas: Mapping[str, StorageClient],
    quorum: int,
    stream: str,
    partition: int,
    epoch: int,
    read_batch_messages: int = 10_000,
    ensemble_size: int | None = None,
) -> Recovery:
    """A new owner's recovery of the previous ledger on its replicas.

    Fences the replicas for `epoch` (`fence_quorum`), takes the highest last
    offset among the R - Q + 1 or more that answered, and copies to every
    responder that lacks entries up to it the missing ones from a responder that
    has them (appended with `epoch`, which the fence let in), so every responder
    ends at the same offset. The caller closes the ledger there
    (`tamto_common.ledgers`). A replica that did not answer may hold entries past
    that end; they were never acknowledged.

    A responder whose log differs from the source's (`_holds_source_log`) gets
    nothing copied and is named in `Recovery.diverged`: it must not take appends
    before the log's catch-up cut its stale tail.
    """
    fenced = await fence_quorum(replicas, quorum, stream, partition, epoch, ensemble_size)
    end = max(fenced.answers.values())
    source = next(node for node, last in fenced.answers.items() if last == end)
    diverged: set[str] = set()
    for node, last in fenced.answers.items():
        if node != source and not await _holds_source_log(
            replicas[source], replicas[node], stream, partition, last + 1
        ):
            diverged.add(node)
            continue
        await copy_entries(
            replicas[source],
            replicas[node],
            stream,
            partition,
            epoch,
            last + 1,
            end + 1,
            read_batch_messages,
            f"recovery of {stream}/{partition}: {source} to {node}",
        )
    return Recovery(end, fenced, frozenset(diverged), source)


async def _holds_source_log(
    source: StorageClient, target: StorageClient, stream: str, partition: int, end: int
) -> bool:
    """Whether `target`, whose log ends at `end`, holds what `source` holds below it.

    Not so when one of them kept a tail an older owner wrote past a recovered
    ledger's end (it missed that recovery, or the catch-up that was cutting it
    was interrupted by a change of owner) and the next ledger wrote other entries
    at those offsets. Which one is stale the offsets alone do not tell, so
    neither is cut here; copying after `end` would keep the difference below the
    log's end for good. False too when that cannot be read now."""
    try:
        return await agreed_end(source, target, stream, partition, end) == end
    except Unavailable:
        return False


async def copy_entries(
    source: StorageClient,
    target: StorageClient,
    stream: str,
    partition: int,
    epoch: int,
    first: int,
    end: int,
    read_batch_messages: int = 10_000,
    what: str = "copy",
) -> int:
    """Copy the entries [`first`, `end`) of a partition from `source` to `target`, whose
    log ends at `first`, batch by batch as stored (so replicas keep the same batch
    boundaries), appended with `epoch`; returns the target's next offset (`end`).

    Unavailable when `source` does not hold `first` on a batch boundary."""
    offset = first
    async for wanted in read_entries(
        source, stream, partition, first, end, read_batch_messages, what
    ):
        offset = await target.append(stream, partition, epoch, wanted)
    return offset


async def read_entries(
    source: StorageClient,
    stream: str,
    partition: int,
    first: int,
    end: int,
    read_batch_messages: int = 10_000,
    what: str = "copy",
    from_cache: bool = True,
) -> AsyncIterator[list[Batch]]:
    """The entries [`first`, `end`) of a partition as `source` stores them, batch by
    batch, one read at a time; Unavailable when `source` does not hold an offset of
    the range on a batch boundary. `from_cache=False`: what that node reads from its
    own files (`StorageClient.read`)."""
    offset = first
    while offset < end:
        batches, _ = await source.read(
            stream, partition, offset, read_batch_messages, from_cache=from_cache
        )
        wanted = [b for b in batches if b.base_offset >= offset and b.end <= end]
        if not wanted or wanted[0].base_offset != offset:
            raise Unavailable(
                f"{what}: the source does not hold offset {offset} on a batch boundary"
            )
        yield wanted
        offset = wanted[-1].end


#: How many of a replica's batches `agreed_end` compares before it gives up (a tail
#: past a recovered end is a few in-flight appends, not thousands of batches).
MAX_AGREE_STEPS = 1_000


async def agreed_end(
    source: StorageClient, target: StorageClient, stream: str, partition: int, end: int
) -> int:
    """The highest offset up to `end`, on a batch boundary of `target`, below which
    `target` holds what `source` holds (read from both nodes, not from the cache).

    Below `end` (the lower of the two logs' ends) a replica can differ only where it
    kept entries past a recovered ledger's end, because it did not answer that
    recovery: the next ledger wrote other entries at those offsets. Its log is
    the source's up to the returned offset and must be truncated there before it
    is caught up. One writer appends each entry of a ledger, so where the message
    at an offset is the same on both (compared as messages: a node that sealed it
    serves it re-encoded from its segment), every one below it is too. Walks back
    a batch of `target` at a time from `end`; Unavailable past `MAX_AGREE_STEPS`.
    """
    for _ in range(MAX_AGREE_STEPS):
        if end <= 0:
            return 0
        theirs, _ = await target.read(stream, partition, end - 1, 1, from_cache=False)
        ours, _ = await source.read(stream, partition, end - 1, 1, from_cache=False)
        if not theirs or not ours:
            raise Unavailable(f"{stream}/{partition}: offset {end - 1} could not be read")
        mine = theirs[0]
        if _message_at(mine, end - 1) == _message_at(ours[0], end - 1):
            return end if mine.end == end else mine.base_offset
        end = mine.base_offset
    raise Unavailable(
        f"{stream}/{partition}: the replica differs from the log over more than "
        f"{MAX_AGREE_STEPS} batches below {end}"
    )


def _message_at(batch: Batch, offset: int) -> tuple[int, list[dict[str, object]]]:
    """The message stored at `offset` of `batch`: its publish time and its columns."""
    row = decode_batch(batch.arrow_ipc).slice(offset - batch.base_offset, 1)
    return batch.publish_time_us, row.to_pylist()
