"""Catching up the replicas of a partition's ledger that take no appends, and
replacing one that stays down (replicated logs).

A replica of the ensemble that takes no appends (it failed one, was down at the
claim, or was behind) is caught up in the background (`_repair_loop`, every
`REPAIR_INTERVAL_S`): once registered again it is opened with this epoch, a tail
it kept past a recovered ledger's end (entries the log does not have) is
truncated (`quorum.agreed_end`, Storage `TruncatePartition`), the entries it
lacks are copied to it from a replica that has them until it is within
`JOIN_GAP` messages of the durable end, and the sender copies the rest
between two appends and adds it to the replicas (BookKeeper's recovery of a
bookie that missed writes, docs/cluster.md section 2).

With `Rereplicate`, a member that stays unregistered for `after_s` is replaced by
a spare storage node (BookKeeper's autorecovery): the spare is caught up the same
way from offset 0, and once it takes appends the replacement is recorded in
every ledger of the partition (`Rereplicate.record`).


`ReplicaCatchUp` is the part of `tamto_router.partition_log.PartitionLog` that does
it; the log's state it works on is declared here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from tamto_common.errors import DataLoss, FailedPrecondition, TamtoError, Unavailable
from tamto_router.cursor_sync import sync_cursors
from tamto_router.damage_repair import DamageRepair
from tamto_router.quorum import agreed_end, copy_entries
from tamto_router.storage_client import StorageClient

log = structlog.get_logger(__name__)

#: How often a replicated log tries to catch up the replicas that take no appends.
REPAIR_INTERVAL_S = 1.0
#: A lagging replica is copied to in the background until it is within this many
#: messages of the durable end; the sender copies the rest before its next append.
JOIN_GAP = 1_000
#: How long an ensemble member stays unregistered before its data is copied to a
#: spare storage node (a restart usually registers again well within it).
REREPLICATE_AFTER_S = 10.0
#: How storage refuses to truncate sealed offsets (`Partition.truncate`: "offsets below
#: N are sealed", asked again with `drop_sealed`; `tamto_storage.sealed_truncate`: "...
#: are sealed and committed to the segment store", a replica that can never agree).
SEALED_REFUSAL = "are sealed"


class Diverged(Unavailable):
    """A replica's copy differs from the log's where storage cannot drop it (sealed)."""


@dataclass(frozen=True)
class Rereplicate:
    """How a replicated log replaces a member that stays down (or whose copy diverged
    where it cannot be truncated).

    Attributes:
        spare_for: a registered storage node outside the given ensemble, or None when
            there is none (the log's `client_for` reaches it).
        record: puts the second node where the first was in the partition's ledgers.
        after_s: how long a member is unregistered (or diverged) before it is replaced.
    """

    spare_for: Callable[[tuple[str, ...]], str | None]
    record: Callable[[str, str], Awaitable[None]]
    after_s: float = REREPLICATE_AFTER_S


class ReplicaCatchUp(DamageRepair):
    """Catches up lagging replicas and replaces lost ones (a mixin of `PartitionLog`)."""

    failure: TamtoError | None
    storage: StorageClient
    ensemble: tuple[str, ...]
    catch_up_errors: dict[str, str]
    _client_for: Callable[[str], StorageClient | None] | None
    _rereplicate: Rereplicate | None
    _replacing: dict[str, str]
    _joiners: dict[str, tuple[StorageClient, int]]
    _wake: asyncio.Event

    def lagging(self) -> list[str]:
        """The ensemble's replicas that take no appends now (replicated logs only)."""
        return [n for n in self.ensemble if self.replicas is not None and n not in self.replicas]

    def healing(self) -> dict[str, str]:
        """Why each lagging replica that is registered takes no appends yet: it is being
        caught up, or filled as a spare in place of a member that stayed down (with the
        last try's error, if it failed). Unregistered ones are down, not healing."""
        if self._client_for is None:
            return {}
        found: dict[str, str] = {}
        for node in self.lagging():
            if self._client_for(node) is None:
                continue
            old = self._replacing.get(node)
            reason = f"re-replicating in place of {old}" if old else "catching up"
            error = self.catch_up_errors.get(node)
            found[node] = f"{reason} (last try: {error})" if error else reason
        return found

    def _source(self) -> StorageClient:
        """A replica holding every durable entry: one that answered the last append."""
        assert self.replicas is not None
        return next((self.replicas[n] for n in self._fresh if n in self.replicas), self.storage)

    async def _repair_loop(self) -> None:
        """Catch up, every `REPAIR_INTERVAL_S`, each lagging replica that is registered."""
        down_since: dict[str, float] = {}
        #: Registered replicas whose copy diverged where it cannot be truncated (sealed).
        diverged_since: dict[str, float] = {}
        while self.failure is None:
            await asyncio.sleep(REPAIR_INTERVAL_S)  # a period, not a wait for a condition
            try:
                await self._repair_round(down_since, diverged_since)
            except Exception:  # a bug here must not end this log's repairs for good
                log.exception(
                    "replica repair round failed", stream=self.stream, partition=self.partition
                )

    async def _repair_round(
        self, down_since: dict[str, float], diverged_since: dict[str, float]
    ) -> None:
        """One round of `_repair_loop`: each lagging replica caught up, or replaced."""
        assert self._client_for is not None
        await self._record_replacements()
        for node in self.lagging():
            client = self._client_for(node)
            if client is None:
                if node not in down_since:
                    log.warning(
                        "replica unregistered: caught up once it registers again",
                        stream=self.stream,
                        partition=self.partition,
                        replica=node,
                    )
                since = down_since.setdefault(node, time.monotonic())
                if self._replace_after(since):
                    self._replace(node)
                continue
            down_since.pop(node, None)
            if node in self._joiners:
                continue
            try:
                await self._catch_up(node, client)
                self.catch_up_errors.pop(node, None)
                diverged_since.pop(node, None)
            except Diverged as exc:  # it will never agree: replaced like a lost one
                since = diverged_since.setdefault(node, time.monotonic())
                if self._replace_after(since):
                    self._replace(node, "diverged")
                else:
                    self._unhealed(
                        node,
                        str(exc),
                        "replica diverged in sealed data: replaced by a spare if it stays so",
                    )
            except Exception as exc:  # down still, or refusing: tried again later
                if isinstance(exc, DataLoss):  # its copy is damaged: repair it
                    self.repair_damage(node, client, exc)
                self._unhealed(node, str(exc), "replica not caught up yet")

    def _unhealed(self, node: str, reason: str, event: str) -> None:
        """Keep why `node` is not healed (`healing`), logging each new reason once."""
        if self.catch_up_errors.get(node) == reason:
            return
        self.catch_up_errors[node] = reason
        log.warning(event, stream=self.stream, partition=self.partition, replica=node, error=reason)

    def _replace_after(self, since: float) -> bool:
        """Whether a member out since `since` (monotonic) is due for replacement."""
        return (
            self._rereplicate is not None and time.monotonic() - since >= self._rereplicate.after_s
        )

    def _replace(self, node: str, why: str = "down") -> None:
        """Put a spare storage node in the ensemble where `node` (down too long, or
        diverged for good) was; it is caught up from offset 0 like any lagging replica."""
        assert self._rereplicate is not None
        new = self._rereplicate.spare_for(self.ensemble)
        if new is None:
            reason = f"{why}, and no spare storage node to re-replicate to"
            self._unhealed(node, reason, "replica not re-replicated")
            return
        self.ensemble = tuple(new if n == node else n for n in self.ensemble)
        self._replacing[new] = self._replacing.pop(node, node)  # a spare that died too
        self.catch_up_errors.pop(node, None)
        log.warning(
            "re-replicating: a replica stayed down, copying the partition to a spare node",
            stream=self.stream,
            partition=self.partition,
            replica=node,
            spare=new,
        )

    async def _record_replacements(self) -> None:
        """Record in the ledgers each spare that takes appends now (retried until done)."""
        assert self.replicas is not None
        for new, old in list(self._replacing.items()):
            if new not in self.replicas or self._rereplicate is None:
                continue
            try:
                await self._rereplicate.record(old, new)
            except Exception as exc:
                log.warning(
                    "re-replication not recorded yet",
                    stream=self.stream,
                    partition=self.partition,
                    replica=old,
                    spare=new,
                    error=str(exc),
                )
                continue
            del self._replacing[new]
            log.info(
                "re-replicated: the spare holds the partition in place of the lost replica",
                stream=self.stream,
                partition=self.partition,
                replica=old,
                spare=new,
            )

    async def _catch_up(self, node: str, client: StorageClient) -> None:
        """Open the partition on `node` with this epoch and copy it the entries it lacks
        until it is within `JOIN_GAP` of the durable end; then hand it to the sender."""
        bounds = await client.open_partition(self.stream, self.partition, self.epoch)
        offset = bounds.next_offset
        if offset == bounds.start_offset:  # it holds nothing (a spare): nothing to agree on
            offset = await self._start_like_source(client, offset)
            agreed = offset
        else:
            agreed = await agreed_end(
                self._source(),
                client,
                self.stream,
                self.partition,
                min(offset, self.durable_offset),
            )
        if agreed < offset:
            # Entries past a recovered ledger's end (it missed that recovery; they
            # were never acknowledged): storage drops them for this epoch, sealed
            # ones too, unless the segment store has them (then it stays out,
            # retried every round, and is replaced by a spare).
            log.info(
                "replica holds entries the log does not have; truncating them",
                stream=self.stream,
                partition=self.partition,
                replica=node,
                replica_end=offset,
                agreed_end=agreed,
            )
            offset = await self._truncate(node, client, agreed)
            if offset != agreed:
                raise Unavailable(f"replica {node} ends at {offset} after truncating to {agreed}")
        while self.durable_offset - offset > JOIN_GAP and self.failure is None:
            offset = await self._copy_to(node, client, offset)
        self._joiners[node] = (client, offset)
        self._wake.set()

    async def _truncate(self, node: str, client: StorageClient, agreed: int) -> int:
        """Drop `node`'s entries from `agreed` on; where they are sealed there, its local
        segments are cut (healing in place, no spare needed). `Diverged` when storage
        cannot (the segment store already committed them): a spare replaces it then."""
        try:
            return await client.truncate(self.stream, self.partition, self.epoch, agreed)
        except FailedPrecondition as exc:
            if SEALED_REFUSAL not in str(exc):
                raise
        log.warning(
            "replica's stale tail is sealed; cutting its segments",
            stream=self.stream,
            partition=self.partition,
            replica=node,
            agreed_end=agreed,
        )
        try:
            return await client.truncate(
                self.stream, self.partition, self.epoch, agreed, drop_sealed=True
            )
        except FailedPrecondition as exc:
            if SEALED_REFUSAL in str(exc):  # committed to the segment store: for good
                raise Diverged(
                    f"replica {node} diverges at {agreed} in sealed data: {exc}"
                ) from exc
            raise

    async def _start_like_source(self, client: StorageClient, offset: int) -> int:
        """Where the copy to an empty replica ending at `offset` starts: there, or,
        when it is empty at 0 and the source's log starts past 0 (retention), at the
        source's start, where storage makes it start, durably (`start_at`)."""
        start = await self._source().current_start(self.stream, self.partition, self.epoch)
        if offset != 0 or start <= 0:
            return offset
        bounds = await client.open_partition(self.stream, self.partition, self.epoch, start)
        return bounds.next_offset

    async def _copy_to(self, node: str, client: StorageClient, offset: int) -> int:
        """Copy `node`, whose log ends at `offset`, the durable entries it lacks."""
        return await copy_entries(
            self._source(),
            client,
            self.stream,
            self.partition,
            self.epoch,
            offset,
            self.durable_offset,
            what=f"catch-up of {node}",
        )

    async def _admit_joiners(self) -> None:
        """Between two appends (every entry sent is durable): copy each joiner the
        last entries it lacks and the cursors the replicas hold (`sync_cursors`), and
        make it a replica again."""
        assert self.replicas is not None
        for node, (client, offset) in list(self._joiners.items()):
            del self._joiners[node]
            try:
                await self._copy_to(node, client, offset)
                await sync_cursors(self.stream, self.partition, self.epoch, self.replicas, client)
            except Exception as exc:
                log.warning(
                    "replica not caught up",
                    stream=self.stream,
                    partition=self.partition,
                    replica=node,
                    error=str(exc),
                )
                continue
            self.replicas[node] = client
            log.info(
                "replica caught up; it takes appends again",
                stream=self.stream,
                partition=self.partition,
                replica=node,
                next_offset=self.durable_offset,
            )
