"""A deleted stream's deletion record in etcd: what is still to be removed, and from when.

Deleting a stream (`tamto stream delete`) removes its definition and puts, in
the same etcd transaction, ``/tamto/deletions/<stream>``::

    {"stream": "orders", "partitions": 3, "deleted_at_us": 1700000000000000,
     "pending": ["storage-a", "storage-b"], "shared_done": false}

`pending` names the storage nodes that may hold a copy (every node of the
stream's ledger ensembles, and every storage node registered then); each
removes its own copy once the grace period has passed and takes itself off the
list. `shared_done` says one node removed what the cluster shares (the Iceberg
table, the segment store's objects, the stream's keys in etcd). The record is
deleted when both are done; while it exists the name cannot be created again,
so a new stream of the name never meets the old one's data (Kafka refuses a
topic "marked for deletion" the same way). The record is in etcd, not in a
process, so the grace period survives restarts and a node that was down when
the stream was deleted removes its copy when it comes back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

import aetcd

from tamto_common.ledgers import LEDGERS
from tamto_common.placement import MOVES_PREFIX, OWNERS_PREFIX

DELETIONS: Final = "/tamto/deletions/"
#: Epoch counters of partition ownership (`tamto_router.ownership`).
EPOCHS: Final = "/tamto/epochs/"


def deletion_key(stream: str) -> bytes:
    """The etcd key of `stream`'s deletion record."""
    return f"{DELETIONS}{stream}".encode()


def stream_prefixes(stream: str) -> list[bytes]:
    """The etcd prefixes holding a stream's per-partition state: ledgers, owners,
    owner epochs and placement moves (each ends in ``/``: ``orders-2`` is not ``orders``)."""
    return [f"{p}{stream}/".encode() for p in (LEDGERS, OWNERS_PREFIX, EPOCHS, MOVES_PREFIX)]


@dataclass(frozen=True)
class StreamDeletion:
    """A deleted stream whose remains are not all removed yet."""

    stream: str
    partitions: int
    deleted_at_us: int
    pending: tuple[str, ...] = ()
    shared_done: bool = False

    def due(self, now_us: int, grace_us: int) -> bool:
        """Whether the grace period after the deletion has passed."""
        return now_us >= self.deleted_at_us + grace_us

    @property
    def finished(self) -> bool:
        return self.shared_done and not self.pending

    def to_json(self) -> bytes:
        data: dict[str, Any] = {
            "stream": self.stream,
            "partitions": self.partitions,
            "deleted_at_us": self.deleted_at_us,
            "pending": sorted(self.pending),
            "shared_done": self.shared_done,
        }
        return json.dumps(data).encode()

    @classmethod
    def from_json(cls, data: bytes) -> StreamDeletion:
        raw = json.loads(data)
        return cls(
            stream=str(raw["stream"]),
            partitions=int(raw["partitions"]),
            deleted_at_us=int(raw["deleted_at_us"]),
            pending=tuple(str(n) for n in raw.get("pending", ())),
            shared_done=bool(raw.get("shared_done", False)),
        )


async def read_deletions(etcd: aetcd.Client) -> list[StreamDeletion]:
    """Every deletion record, by stream name."""
    found = [StreamDeletion.from_json(kv.value) for kv in await etcd.get_prefix(DELETIONS.encode())]
    return sorted(found, key=lambda d: d.stream)


async def holders(etcd: aetcd.Client, stream: str, registered: list[str]) -> tuple[str, ...]:
    """The storage nodes that may hold a copy of `stream`: those of its ledger
    ensembles and those `registered` now."""
    nodes = set(registered)
    for kv in await etcd.get_prefix(f"{LEDGERS}{stream}/".encode()):
        with_ledgers = json.loads(kv.value)
        for ledger in with_ledgers.get("ledgers", ()):
            nodes.update(str(n) for n in ledger.get("ensemble", ()))
    return tuple(sorted(nodes))


async def update_deletion(
    etcd: aetcd.Client, stream: str, change: Callable[[StreamDeletion], StreamDeletion]
) -> StreamDeletion | None:
    """Apply `change` to the record (compare-and-swap, read again on a conflict);
    a finished record is deleted. Returns the record as written, None when gone."""
    key = deletion_key(stream)
    tx = etcd.transactions
    while True:
        kv = await etcd.get(key)
        if kv is None:
            return None
        new = change(StreamDeletion.from_json(kv.value))
        write = tx.delete(key) if new.finished else tx.put(key, new.to_json())
        ok, _ = await etcd.transaction(
            compare=[tx.mod(key) == kv.mod_revision], success=[write], failure=[]
        )
        if ok:
            return None if new.finished else new


def without_node(node: str) -> Callable[[StreamDeletion], StreamDeletion]:
    """The change that records `node` removed its copy."""
    return lambda d: replace(d, pending=tuple(n for n in d.pending if n != node))


def shared_removed(d: StreamDeletion) -> StreamDeletion:
    """The change that records the shared remains removed."""
    return replace(d, shared_done=True)
