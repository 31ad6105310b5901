"""`MemberDirectory` sees a service come back at once.

A storage node killed for longer than the lease TTL loses its key; the routers'
directories must see its restart within a tenth of a second, not at their next
one-second refresh.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tamto_common import membership
from tamto_common.errors import Unavailable
from tamto_common.membership import Member, MemberDirectory
from tamto_testing.waiting import eventually


@dataclass
class KV:
    value: bytes


class FakeEtcd:
    def __init__(self) -> None:
        self.members: dict[str, Member] = {}

    async def get_prefix(self, prefix: bytes) -> list[KV]:
        return [
            KV(m.to_json()) for key, m in self.members.items() if key.startswith(prefix.decode())
        ]


def member(service: str) -> Member:
    return Member(service, f"{service}-1", "127.0.0.1:1", "127.0.0.1:2", "dev", 1, 0.0)


async def test_a_service_that_lost_every_member_is_looked_for_eagerly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(membership, "EAGER_FOR_S", 0.0)  # no eagerness after a change
    etcd = FakeEtcd()
    storage, router = member("storage"), member("router")
    etcd.members = {storage.key: storage, router.key: router}
    async with MemberDirectory(etcd, interval_s=30.0) as directory:
        del etcd.members[storage.key]  # its lease expired
        await directory.refresh()
        assert directory.members("storage") == []
        etcd.members[storage.key] = storage  # restarted and registered again
        took = await eventually(lambda: directory.members("storage") != [], 2, "storage seen")
        assert took < 0.5, "while a service has no member the directory refreshes every 0.1 s"


async def test_a_wanted_service_not_seen_yet_is_looked_for_eagerly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A router's storage node registering after the directory's first eager seconds
    (a slow start) is seen within a tenth of a second, not at the next 1 s refresh."""
    monkeypatch.setattr(membership, "EAGER_FOR_S", 0.0)  # the first eager seconds are over
    etcd = FakeEtcd()
    router = member("router")
    etcd.members = {router.key: router}
    async with MemberDirectory(etcd, interval_s=30.0, wanted=("storage",)) as directory:
        await directory.refresh()
        assert directory.members("storage") == []
        storage = member("storage")
        etcd.members[storage.key] = storage  # registers late
        took = await eventually(lambda: directory.members("storage") != [], 2, "storage seen")
        assert took < 0.5, (
            "while a wanted service has no member the directory refreshes every 0.1 s"
        )


async def test_first_refreshes_once_on_a_miss_and_names_a_missing_service() -> None:
    """A member that joined since the last refresh is found at once; a service with none
    is Unavailable, named."""
    etcd = FakeEtcd()
    async with MemberDirectory(etcd, interval_s=30.0) as directory:
        await directory.refresh()
        auth = member("auth")
        etcd.members[auth.key] = auth  # joined after the last refresh
        assert await directory.first("auth") == auth
        with pytest.raises(Unavailable, match="no storage service is registered"):
            await directory.first("storage")
