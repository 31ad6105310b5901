"""Which router owns a partition: the consistent-hash ring over live routers."""

from __future__ import annotations

from tamto_common.errors import Unavailable
from tamto_common.membership import MemberDirectory
from tamto_common.ring import HashRing, partition_key


class Routes:
    def __init__(self, directory: MemberDirectory) -> None:
        self._directory = directory
        self._ring_for: tuple[tuple[str, str], ...] = ()
        self._ring = HashRing([])

    def _current(self) -> tuple[HashRing, dict[str, str]]:
        members = {m.instance_id: m.address for m in self._directory.members("router")}
        signature = tuple(sorted(members.items()))
        if signature != self._ring_for:
            self._ring, self._ring_for = HashRing(members), signature
        return self._ring, members

    async def router_for(self, stream: str, partition: int) -> str:
        """The address of the router owning the partition (refreshing once on a miss)."""
        ring, members = self._current()
        if not ring:
            await self._directory.refresh()
            ring, members = self._current()
        if not ring:
            raise Unavailable("no router is registered")
        return members[ring.owner(partition_key(stream, partition))]

    async def auth_address(self) -> str:
        members = self._directory.members("auth")
        if not members:
            await self._directory.refresh()
            members = self._directory.members("auth")
        if not members:
            raise Unavailable("no auth service is registered")
        return members[0].address
