"""Which router owns a partition: the ring over live routers, and the operator's word.

A partition's owner is the successor of its hash on the consistent-hash ring of
live routers (`tamto_common.ring`), except where an operator (or load balancing)
said otherwise. Those decisions are kept in etcd, so every gateway and router
honours the same ones and they survive restarts (docs/cluster.md section 4):

- a **move** `/tamto/placement/moves/<stream>/<p>` names the router that owns the
  partition instead of the ring's choice (`tamto partition move STREAM/P --to R`);
  it is honoured while that router is live and not drained, removed by a move
  `--to ring`, and removed by routers once its router stayed away
  `MOVE_TARGET_GONE_S` (`GoneTargets`);
- a **drained** router `/tamto/placement/drained/<router>` gets no partitions
  from the ring (`tamto node drain`) until it is undrained.

Routers hand back what is not theirs by `Placement.owner` (the hand-back loop of
`tamto_router.server`), and the new owner claims the partition when it is first
used; a ledger changes hands then, and subscriptions keep each key's order across
it (the drain gate, `tamto_router.partition_log.drain_gate`).

`move_partition` is the one operation "move partition P to router R" (what
`tamto partition move` and load balancing call); `set_drained` is the node verb.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import aetcd
import structlog

from tamto_common.errors import FailedPrecondition, InvalidArgument, NotFound
from tamto_common.membership import list_members
from tamto_common.names import check_name
from tamto_common.refreshed_view import RefreshedView
from tamto_common.ring import HashRing, partition_key
from tamto_common.streams import read_stream

log = structlog.get_logger(__name__)

PLACEMENT_PREFIX = "/tamto/placement/"
MOVES_PREFIX = PLACEMENT_PREFIX + "moves/"
DRAINED_PREFIX = PLACEMENT_PREFIX + "drained/"

#: A move to a router that stayed unregistered this long is removed (it left).
MOVE_TARGET_GONE_S = 10.0


def move_key(stream: str, partition: int) -> bytes:
    return f"{MOVES_PREFIX}{stream}/{partition}".encode()


def drained_key(router: str) -> bytes:
    return f"{DRAINED_PREFIX}{router}".encode()


@dataclass(frozen=True)
class Placement:
    """The operator's placement decisions: moved partitions and drained routers."""

    #: (stream, partition) -> the router it was moved to.
    moves: Mapping[tuple[str, int], str] = field(default_factory=dict)
    drained: frozenset[str] = frozenset()

    def eligible(self, routers: Iterable[str]) -> set[str]:
        """The live routers the ring places partitions on: those not drained (all of
        them if every one is drained, so that partitions always have an owner)."""
        live = set(routers)
        return (live - self.drained) or live

    def owner(
        self, routers: Collection[str], stream: str, partition: int, ring: HashRing | None = None
    ) -> str:
        """The router that owns the partition among the live `routers`: the one it was
        moved to while that one is live and not drained, else the ring's choice over
        the eligible routers (`ring`: that ring, when the caller keeps one)."""
        target = self.moves.get((stream, partition))
        if target is not None and target in routers and target not in self.drained:
            return target
        if ring is None:
            ring = HashRing(self.eligible(routers))
        return ring.owner(partition_key(stream, partition))


#: Where routers record their partition claims, `<prefix><stream>/<p>` -> {"owner",
#: "epoch"} under the owner's lease (`tamto_router.ownership`).
OWNERS_PREFIX = "/tamto/owners/"


async def read_owners(etcd: aetcd.Client) -> dict[tuple[str, int], str]:
    """(stream, partition) -> the instance id of the router that claimed it now."""
    owners: dict[tuple[str, int], str] = {}
    for kv in await etcd.get_prefix(OWNERS_PREFIX.encode()):
        stream, _, partition = kv.key.decode()[len(OWNERS_PREFIX) :].rpartition("/")
        with contextlib.suppress(ValueError, KeyError, TypeError):
            owners[(stream, int(partition))] = str(json.loads(kv.value)["owner"])
    return owners


async def read_placement(etcd: aetcd.Client) -> Placement:
    """The placement decisions stored in etcd now."""
    moves: dict[tuple[str, int], str] = {}
    drained: set[str] = set()
    for kv in await etcd.get_prefix(PLACEMENT_PREFIX.encode()):
        key = kv.key.decode()
        if key.startswith(DRAINED_PREFIX):
            drained.add(key[len(DRAINED_PREFIX) :])
        elif key.startswith(MOVES_PREFIX):
            stream, _, partition = key[len(MOVES_PREFIX) :].rpartition("/")
            with contextlib.suppress(ValueError):
                moves[(stream, int(partition))] = json.loads(kv.value)["router"]
    return Placement(moves, frozenset(drained))


async def _live_routers(etcd: aetcd.Client) -> list[str]:
    return [m.instance_id for m in await list_members(etcd, "router")]


async def move_partition(
    etcd: aetcd.Client, stream: str, partition: int, router: str | None
) -> str:
    """Move the partition to `router` (None: back to the ring's choice) and return the
    router that owns it now by placement. Durable: recorded in etcd, honoured by every
    gateway and router; the current owner hands the partition back within seconds and
    the new one claims it on its next use, keeping each key's order for subscriptions.

    NotFound for an unknown stream or partition; FailedPrecondition for a router that
    is not live (not registered) or drained; InvalidArgument for malformed names."""
    check_name("stream", stream)
    if router is not None:
        check_name("router", router)
    definition = await read_stream(etcd, stream)
    if definition is None:
        raise NotFound(f"stream {stream!r} does not exist")
    if not 0 <= partition < definition.partitions:
        if partition < 0:
            raise InvalidArgument(f"partition must be 0 or more, not {partition}")
        raise NotFound(
            f"stream {stream!r} has no partition {partition} "
            f"(it has {definition.partitions}: 0-{definition.partitions - 1})"
        )
    routers = await _live_routers(etcd)
    placement = await read_placement(etcd)
    if router is None:
        await etcd.delete(move_key(stream, partition))
        log.info("partition move removed", stream=stream, partition=partition)
        placement = Placement(
            {k: v for k, v in placement.moves.items() if k != (stream, partition)},
            placement.drained,
        )
        if not routers:
            raise FailedPrecondition("no router is registered")
        return placement.owner(routers, stream, partition)
    if router not in routers:
        raise FailedPrecondition(
            f"router {router!r} is not live (not registered); "
            f"live routers: {', '.join(sorted(routers)) or 'none'}"
        )
    if router in placement.drained:
        raise FailedPrecondition(
            f"router {router!r} is drained: undrain it first (tamto node undrain {router})"
        )
    await etcd.put(move_key(stream, partition), json.dumps({"router": router}).encode())
    log.info("partition moved", stream=stream, partition=partition, router=router)
    return router


async def set_drained(etcd: aetcd.Client, router: str, drained: bool) -> list[str]:
    """Drain `router` (it gets no partitions until undrained; moves to it are removed)
    or undrain it; returns the drained routers after the change.

    NotFound for a router that is neither live nor drained; FailedPrecondition for
    draining the last live router that is not drained (partitions need an owner)."""
    check_name("router", router)
    routers = await _live_routers(etcd)
    placement = await read_placement(etcd)
    if router not in routers and router not in placement.drained:
        raise NotFound(
            f"router {router!r} is not registered; "
            f"live routers: {', '.join(sorted(routers)) or 'none'}"
        )
    if not drained:
        await etcd.delete(drained_key(router))
        log.info("router undrained", router=router)
        return sorted(placement.drained - {router})
    if not set(routers) - placement.drained - {router}:
        raise FailedPrecondition(
            f"draining {router!r} would leave no live router to own partitions"
        )
    await etcd.put(drained_key(router), b"{}")
    for (stream, partition), target in placement.moves.items():
        if target == router:
            await etcd.delete(move_key(stream, partition))
    log.info("router drained", router=router)
    return sorted(placement.drained | {router})


class PlacementView(RefreshedView):
    """A local, periodically refreshed copy of the placement decisions:
    `current` to read, `changed` set (and replaced) on a change."""

    what = "placement view"

    def __init__(self, etcd: aetcd.Client, interval_s: float = 1.0) -> None:
        super().__init__(interval_s)
        self._etcd = etcd
        self.current = Placement()

    async def refresh(self) -> None:
        placement = await read_placement(self._etcd)
        if placement != self.current:
            self.current = placement
            self.announce_change()


class GoneTargets:
    """Removes moves whose router stayed unregistered `MOVE_TARGET_GONE_S` (it left):
    routers call `check` on each pass of their hand-back loop."""

    def __init__(self, etcd: aetcd.Client) -> None:
        self._etcd = etcd
        self._missing_since: dict[str, float] = {}

    async def check(self, placement: Placement, routers: Collection[str]) -> None:
        now = time.monotonic()
        targets = set(placement.moves.values()) - set(routers)
        self._missing_since = {r: self._missing_since.get(r, now) for r in targets}
        for (stream, partition), target in placement.moves.items():
            since = self._missing_since.get(target)
            if since is not None and now - since >= MOVE_TARGET_GONE_S:
                await self._etcd.delete(move_key(stream, partition))
                log.info(
                    "partition move removed: its router left",
                    stream=stream,
                    partition=partition,
                    router=target,
                )
