"""Which router owns a partition: the consistent-hash ring over live routers, or the
operator's placement decisions (moved partitions, drained routers: `tamto_common.placement`)."""

from __future__ import annotations

import json

import aetcd

from tamto_common.errors import Unavailable
from tamto_common.membership import MemberDirectory
from tamto_common.placement import OWNERS_PREFIX, Placement, PlacementView
from tamto_common.refreshed_view import RefreshedView, next_change
from tamto_common.ring import HashRing

_MAX_OWNERS = 100_000


class Routes:
    def __init__(
        self,
        directory: MemberDirectory,
        etcd: aetcd.Client | None = None,
        placement: PlacementView | None = None,
    ) -> None:
        self._directory = directory
        self._etcd = etcd
        self._placement = placement
        self._decided = Placement()  # the placement the ring and owners below follow
        self._ring_for: tuple[tuple[str, str], ...] = ()
        self._ring = HashRing([])
        self._addresses: dict[str, str] = {}
        self._seen: object = None  # the directory's router list the ring was built from
        #: Owners looked up on the current ring: (stream, partition) -> address.
        self._owners: dict[tuple[str, int], str] = {}

    def _current(self) -> tuple[HashRing, dict[str, str]]:
        routers = self._directory.members("router")
        decided = self._placement.current if self._placement is not None else self._decided
        # The directory and the placement view replace their values when they change.
        if routers is self._seen and decided is self._decided:
            return self._ring, self._addresses
        members = {m.instance_id: m.address for m in routers}
        signature = tuple(sorted(members.items()))
        if signature != self._ring_for or decided != self._decided:
            self._ring, self._ring_for = HashRing(decided.eligible(members)), signature
            self._owners = {}
        self._decided = decided
        self._addresses, self._seen = members, routers
        return self._ring, members

    async def router_for(self, stream: str, partition: int) -> str:
        """The address of the router owning the partition (refreshing once on a miss)."""
        owner = self.owner_now(stream, partition)
        if owner is None:
            await self._directory.refresh()
            owner = self.owner_now(stream, partition)
        if owner is None:
            raise Unavailable("no router is registered")
        return owner

    def owner_now(self, stream: str, partition: int) -> str | None:
        """The address of the router owning the partition by the current view (None
        while no router is registered)."""
        ring, members = self._current()
        owner = self._owners.get((stream, partition))
        if owner is not None:
            return owner
        if not ring:
            return None
        owner = members[self._decided.owner(members.keys(), stream, partition, ring)]
        if len(self._owners) >= _MAX_OWNERS:
            self._owners.clear()
        self._owners[(stream, partition)] = owner
        return owner

    def view(self) -> tuple[object, object]:
        """What the owners follow from: the directory's routers and the placement, each
        replaced (not changed in place) when it changes, so compared by identity."""
        decided = self._placement.current if self._placement is not None else self._decided
        return self._directory.members("router"), decided

    def router_addresses(self) -> set[str]:
        """The addresses of the registered routers, by the current view."""
        return set(self._current()[1].values())

    async def next_change(self, timeout_s: float) -> None:
        """Until the routers or the placement decisions change, or `timeout_s` passes."""
        views: list[RefreshedView] = [self._directory]
        if self._placement is not None:
            views.append(self._placement)
        await next_change(views, timeout_s)

    async def lookup(self, stream: str, partitions: int) -> list[tuple[int, str, int]]:
        """(partition, owner's client address or "", epoch of its claim or 0) for each
        partition of `stream`: the direct path's metadata (docs/cluster.md section 5)."""
        clients = {m.address: m.client_address for m in self._directory.members("router")}
        epochs: dict[int, int] = {}
        if self._etcd is not None:
            prefix = f"{OWNERS_PREFIX}{stream}/"
            for kv in await self._etcd.get_prefix(prefix.encode()):
                try:
                    epochs[int(kv.key.decode().removeprefix(prefix))] = int(
                        json.loads(kv.value)["epoch"]
                    )
                except (ValueError, KeyError, TypeError):
                    continue
        answer = []
        for partition in range(partitions):
            address = await self.router_for(stream, partition)
            answer.append((partition, clients.get(address, ""), epochs.get(partition, 0)))
        return answer

    async def auth_address(self) -> str:
        return (await self._directory.first("auth")).address
