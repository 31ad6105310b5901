"""`KeptLease.valid`: an owner knows when etcd may have let its lease expire.

While etcd cannot be reached the lease is not renewed; it stays valid for at most
the TTL counted from the last refresh etcd answered (from when it was sent), so
what the lease protects stops before anyone else could be granted it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tamto_common.membership import KeptLease
from tamto_testing.waiting import eventually


@dataclass
class Refreshed:
    TTL: int


class FakeLease:
    def __init__(self, etcd: FakeEtcd) -> None:
        self._etcd = etcd

    async def refresh(self) -> Refreshed:
        if self._etcd.down:
            raise ConnectionError("etcd unreachable")
        self._etcd.refreshes += 1
        return Refreshed(self._etcd.ttl)

    async def revoke(self) -> None:
        return None


class FakeEtcd:
    def __init__(self, ttl: int) -> None:
        self.ttl = ttl
        self.down = False
        self.refreshes = 0

    async def lease(self, ttl: int) -> FakeLease:
        if self.down:
            raise ConnectionError("etcd unreachable")
        return FakeLease(self)


async def test_the_lease_stops_being_valid_within_its_ttl_of_etcd_going_away() -> None:
    etcd = FakeEtcd(ttl=1)
    async with KeptLease(etcd, 1) as kept:
        assert kept.valid()
        await eventually(lambda: etcd.refreshes >= 1, 3, "a refresh")
        etcd.down = True
        down_at = time.monotonic()
        last_valid = down_at

        def lapsed() -> bool:
            nonlocal last_valid
            now = time.monotonic()  # before valid() reads the clock: valid at `now` too
            if kept.valid():
                last_valid = now
                return False
            return True

        await eventually(lapsed, 3, "the lease to be no longer valid")
        # Valid until at most one TTL after the last refresh sent before the outage. The
        # last moment it was seen valid, not when a poll first saw it lapse: a loaded
        # machine may wake the poll a while after the lapse.
        assert last_valid - down_at <= 1.0
        etcd.down = False
        renewed_in = await eventually(kept.valid, 3, "the lease to be renewed")
        assert renewed_in < 0.5, "a failing keep-alive is retried every 0.2 s"


async def test_without_an_answer_from_etcd_a_lease_was_never_valid() -> None:
    etcd = FakeEtcd(ttl=5)
    kept = KeptLease(etcd, 5)
    assert not kept.valid()
