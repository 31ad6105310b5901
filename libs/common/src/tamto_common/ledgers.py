"""A partition's ledger list in etcd: where its data is, recorded and never recomputed.

A partition's log is a sequence of **ledgers**, one per owner epoch, each with
the storage nodes that hold it (its *ensemble*, storage instance ids) and its
offset range. `/tamto/ledgers/<stream>/<p>` holds the list as one JSON document
(docs/cluster.md section 1):

    {"ledgers": [{"epoch": 3, "ensemble": ["storage-a"], "ack_quorum": 1,
                  "first_offset": 0, "last_offset": 1041, "state": "closed"},
                 {"epoch": 5, "ensemble": ["storage-a"], "ack_quorum": 1,
                  "first_offset": 1042, "last_offset": null, "state": "open"}]}

Every change is ONE etcd transaction that compares the key's `mod_revision` with
the one read (or the one the caller passes in `based_on`), so two routers can
never both change the list from the same state: the loser gets `LedgerConflict`
and reads again. A closed ledger's range is never reopened or moved, which is
what lets a reader of offset X go to the nodes of the ledger holding X.

A ledger may be empty: `last_offset == first_offset - 1`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

import aetcd

from tamto_common.errors import FailedPrecondition, NotFound

LEDGERS: Final = "/tamto/ledgers/"

LedgerState = Literal["open", "closed"]


class LedgerConflict(FailedPrecondition):
    """The ledger list changed since it was read (another router wrote it), or the
    change asked for does not fit the list as it is (a stale epoch, a gap)."""


def ledgers_key(stream: str, partition: int) -> bytes:
    """The etcd key holding the ledger list of `stream`/`partition`."""
    return f"{LEDGERS}{stream}/{partition}".encode()


@dataclass(frozen=True)
class Ledger:
    """One owner epoch's part of a partition's log.

    Attributes:
        epoch: the owner epoch that writes it (`/tamto/epochs/<stream>/<p>`).
        ensemble: storage instance ids holding every entry of it.
        ack_quorum: replicas that must have an entry fsynced before it is acked.
        first_offset: its first offset.
        last_offset: its last offset once closed (first_offset - 1: empty); None while open.
        state: "open" (its owner may append) or "closed" (its range is final).
    """

    epoch: int
    ensemble: tuple[str, ...]
    ack_quorum: int
    first_offset: int
    last_offset: int | None = None
    state: LedgerState = "open"

    @property
    def is_open(self) -> bool:
        return self.state == "open"

    def holds(self, offset: int) -> bool:
        """Whether `offset` is in this ledger's range (an open ledger's has no end yet)."""
        if offset < self.first_offset:
            return False
        return self.last_offset is None or offset <= self.last_offset

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "ensemble": list(self.ensemble),
            "ack_quorum": self.ack_quorum,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "state": self.state,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ledger:
        state = data["state"]
        if state not in ("open", "closed"):
            raise ValueError(f"unknown ledger state {state!r}")
        last = data.get("last_offset")
        return cls(
            epoch=int(data["epoch"]),
            ensemble=tuple(str(node) for node in data["ensemble"]),
            ack_quorum=int(data["ack_quorum"]),
            first_offset=int(data["first_offset"]),
            last_offset=None if last is None else int(last),
            state=state,
        )


@dataclass(frozen=True)
class LedgerList:
    """A partition's ledgers in offset order, as read at etcd `revision`
    (the key's mod_revision; 0: the key does not exist yet)."""

    stream: str
    partition: int
    ledgers: tuple[Ledger, ...] = ()
    revision: int = 0

    @property
    def current(self) -> Ledger | None:
        """The last ledger (open while its owner writes), or None for a partition never opened."""
        return self.ledgers[-1] if self.ledgers else None

    @property
    def next_offset(self) -> int | None:
        """Where a ledger opened after a closed last one starts; None if there is none
        or the last one is still open."""
        last = self.current
        if last is None or last.last_offset is None:
            return None
        return last.last_offset + 1

    def holding(self, offset: int) -> Ledger | None:
        """The ledger whose range holds `offset`, or None (below the first, or past the end)."""
        for ledger in reversed(self.ledgers):
            if ledger.holds(offset):
                return ledger
        return None

    def to_json(self) -> bytes:
        return json.dumps({"ledgers": [ledger.to_dict() for ledger in self.ledgers]}).encode()

    @classmethod
    def from_json(cls, stream: str, partition: int, data: bytes, revision: int) -> LedgerList:
        ledgers = tuple(Ledger.from_dict(item) for item in json.loads(data)["ledgers"])
        return cls(stream, partition, ledgers, revision)

    def _name(self) -> str:
        return f"{self.stream}/{self.partition}"


async def read_ledgers(etcd: aetcd.Client, stream: str, partition: int) -> LedgerList:
    """The partition's ledger list (empty, revision 0, if it has none yet)."""
    kv = await etcd.get(ledgers_key(stream, partition))
    if kv is None:
        return LedgerList(stream, partition)
    return LedgerList.from_json(stream, partition, kv.value, kv.mod_revision)


async def list_ledgers(etcd: aetcd.Client) -> list[LedgerList]:
    """Every partition's ledger list, by stream and partition (`tamto status`)."""
    found = []
    for kv in await etcd.get_prefix(LEDGERS.encode()):
        stream, _, partition = kv.key.decode()[len(LEDGERS) :].rpartition("/")
        if not stream or not partition.isdigit():
            continue  # not a ledger list's key
        found.append(LedgerList.from_json(stream, int(partition), kv.value, kv.mod_revision))
    return sorted(found, key=lambda ledgers: (ledgers.stream, ledgers.partition))


async def open_ledger(
    etcd: aetcd.Client,
    stream: str,
    partition: int,
    epoch: int,
    ensemble: tuple[str, ...],
    ack_quorum: int,
    first_offset: int,
    *,
    previous_last_offset: int | None = None,
    based_on: LedgerList | None = None,
) -> LedgerList:
    """Append an open ledger for `epoch`; returns the list as written.

    It closes nothing by itself: when the last ledger is still open with another
    (older) epoch it refuses, unless `previous_last_offset` gives that ledger's
    closing offset (what recovery found at the end of its replicas); then the
    same transaction closes it there. The new ledger must start right after the
    last one (`first_offset == last_offset + 1`), and its epoch must be newer
    than every ledger's. Opening again the ledger of the same epoch with the
    same ensemble and start changes nothing.
    """
    if ack_quorum < 1 or ack_quorum > len(ensemble):
        raise ValueError(f"ack_quorum {ack_quorum} must be between 1 and {len(ensemble)}")
    if len(set(ensemble)) != len(ensemble):
        raise ValueError(f"ensemble {list(ensemble)} names a node twice")
    current = based_on if based_on is not None else await read_ledgers(etcd, stream, partition)
    ledgers = list(current.ledgers)
    new = Ledger(epoch, tuple(ensemble), ack_quorum, first_offset)
    last = current.current
    if last is not None:
        if last.epoch == epoch and last.is_open:
            if last == new:
                return current
            raise LedgerConflict(
                f"ledger list of {current._name()}: epoch {epoch} already has an open "
                f"ledger from offset {last.first_offset} on {list(last.ensemble)}"
            )
        if last.epoch >= epoch:
            raise LedgerConflict(
                f"ledger list of {current._name()}: epoch {epoch} is not newer than its "
                f"last ledger's epoch {last.epoch}"
            )
        if last.is_open:
            if previous_last_offset is None:
                raise LedgerConflict(
                    f"ledger list of {current._name()}: the ledger of epoch {last.epoch} "
                    "is still open; give its closing offset to close it"
                )
            if previous_last_offset < last.first_offset - 1:
                raise LedgerConflict(
                    f"ledger list of {current._name()}: closing offset {previous_last_offset} "
                    f"is below the start {last.first_offset} of epoch {last.epoch}'s ledger"
                )
            last = replace(last, last_offset=previous_last_offset, state="closed")
            ledgers[-1] = last
        assert last.last_offset is not None
        if first_offset != last.last_offset + 1:
            raise LedgerConflict(
                f"ledger list of {current._name()}: a ledger from offset {first_offset} does "
                f"not follow epoch {last.epoch}'s, which ends at {last.last_offset}"
            )
    ledgers.append(new)
    return await _write(etcd, current, tuple(ledgers))


async def close_ledger(
    etcd: aetcd.Client,
    stream: str,
    partition: int,
    epoch: int,
    last_offset: int,
    *,
    based_on: LedgerList | None = None,
) -> LedgerList:
    """Close the open ledger of `epoch` at `last_offset` (first_offset - 1: empty).

    Closing it again at the same offset changes nothing; any other closed or
    missing ledger is a `LedgerConflict`.
    """
    current = based_on if based_on is not None else await read_ledgers(etcd, stream, partition)
    last = current.current
    if last is None or last.epoch != epoch:
        raise LedgerConflict(
            f"ledger list of {current._name()}: its last ledger is "
            f"{'none' if last is None else f'of epoch {last.epoch}'}, not of epoch {epoch}"
        )
    if not last.is_open:
        if last.last_offset == last_offset:
            return current
        raise LedgerConflict(
            f"ledger list of {current._name()}: epoch {epoch}'s ledger is already closed "
            f"at {last.last_offset}"
        )
    if last_offset < last.first_offset - 1:
        raise LedgerConflict(
            f"ledger list of {current._name()}: closing offset {last_offset} is below "
            f"the start {last.first_offset} of epoch {epoch}'s ledger"
        )
    closed = replace(last, last_offset=last_offset, state="closed")
    return await _write(etcd, current, (*current.ledgers[:-1], closed))


async def replace_replica(
    etcd: aetcd.Client,
    stream: str,
    partition: int,
    epoch: int,
    old: str,
    new: str,
    *,
    based_on: LedgerList | None = None,
) -> LedgerList:
    """In the ensemble of `epoch`'s ledger, put storage node `new` where `old` was
    (after `new` received a copy of the ledger's range: re-replication)."""
    current = based_on if based_on is not None else await read_ledgers(etcd, stream, partition)
    index = next((i for i, x in enumerate(current.ledgers) if x.epoch == epoch), None)
    if index is None:
        raise NotFound(f"ledger list of {current._name()} has no ledger of epoch {epoch}")
    ledger = current.ledgers[index]
    if old not in ledger.ensemble:
        raise LedgerConflict(
            f"ledger list of {current._name()}: {old} is not in epoch {epoch}'s ensemble "
            f"{list(ledger.ensemble)}"
        )
    if new in ledger.ensemble:
        raise LedgerConflict(
            f"ledger list of {current._name()}: {new} is already in epoch {epoch}'s "
            f"ensemble {list(ledger.ensemble)}"
        )
    ensemble = tuple(new if node == old else node for node in ledger.ensemble)
    ledgers = list(current.ledgers)
    ledgers[index] = replace(ledger, ensemble=ensemble)
    return await _write(etcd, current, tuple(ledgers))


async def replace_in_ledgers(
    etcd: aetcd.Client, stream: str, partition: int, old: str, new: str
) -> LedgerList:
    """Put storage node `new` where `old` was in every ledger of the partition that
    names `old` (after `new` received a copy of all of them: re-replication), one
    `replace_replica` transaction each, reading again after a conflicting change."""
    for _ in range(100):
        current = await read_ledgers(etcd, stream, partition)
        todo = [x for x in current.ledgers if old in x.ensemble and new not in x.ensemble]
        if not todo:
            return current
        try:
            epoch = todo[0].epoch
            await replace_replica(etcd, stream, partition, epoch, old, new, based_on=current)
        except LedgerConflict as exc:
            if "changed meanwhile" not in str(exc):
                raise
    raise LedgerConflict(f"ledger list of {stream}/{partition} kept changing meanwhile")


async def _write(
    etcd: aetcd.Client, current: LedgerList, ledgers: tuple[Ledger, ...]
) -> LedgerList:
    """Put `ledgers` if the key is still at `current.revision`: one transaction."""
    key = ledgers_key(current.stream, current.partition)
    written = replace(current, ledgers=ledgers)
    tx = etcd.transactions
    ok, responses = await etcd.transaction(
        compare=[tx.mod(key) == current.revision],
        success=[tx.put(key, written.to_json()), tx.get(key)],
        failure=[tx.get(key)],
    )
    if not ok:
        now = _revision_of(responses)
        raise LedgerConflict(
            f"ledger list of {current._name()} changed meanwhile (read at revision "
            f"{current.revision}, now {now}): read it again"
        )
    return replace(written, revision=_revision_of(responses[1:]))


def _revision_of(responses: Any) -> int:
    """The key's mod_revision from a transaction's first response, a `get` (0: no key)."""
    try:
        kvs = responses[0]
        return int(kvs[0][1].mod_revision) if kvs else 0
    except (IndexError, TypeError, AttributeError):
        return -1
