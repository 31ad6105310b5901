"""Which router owns a partition: the consistent-hash ring over live routers."""

from __future__ import annotations

from tamto_common.errors import Unavailable
from tamto_common.membership import MemberDirectory
from tamto_common.ring import HashRing, partition_key

_MAX_OWNERS = 100_000


class Routes:
    def __init__(self, directory: MemberDirectory) -> None:
        self._directory = directory
        self._ring_for: tuple[tuple[str, str], ...] = ()
        self._ring = HashRing([])
        self._addresses: dict[str, str] = {}
        self._seen: object = None  # the directory's router list the ring was built from
        #: Owners looked up on the current ring: (stream, partition) -> address.
        self._owners: dict[tuple[str, int], str] = {}

    def _current(self) -> tuple[HashRing, dict[str, str]]:
        routers = self._directory.members("router")
        if routers is self._seen:  # the directory replaces its lists when members change
            return self._ring, self._addresses
        members = {m.instance_id: m.address for m in routers}
        signature = tuple(sorted(members.items()))
        if signature != self._ring_for:
            self._ring, self._ring_for = HashRing(members), signature
            self._owners = {}
        self._addresses, self._seen = members, routers
        return self._ring, members

    async def router_for(self, stream: str, partition: int) -> str:
        """The address of the router owning the partition (refreshing once on a miss)."""
        ring, members = self._current()
        owner = self._owners.get((stream, partition))
        if owner is not None:
            return owner
        if not ring:
            await self._directory.refresh()
            ring, members = self._current()
        if not ring:
            raise Unavailable("no router is registered")
        owner = members[ring.owner(partition_key(stream, partition))]
        if len(self._owners) >= _MAX_OWNERS:
            self._owners.clear()
        self._owners[(stream, partition)] = owner
        return owner

    async def auth_address(self) -> str:
        members = self._directory.members("auth")
        if not members:
            await self._directory.refresh()
            members = self._directory.members("auth")
        if not members:
            raise Unavailable("no auth service is registered")
        return members[0].address
