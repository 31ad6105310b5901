"""A lease kept on its own thread survives an event loop held longer than its TTL.

A router whose event loop was saturated by a crowd of consumers
missed its etcd keep-alive and lost its ownership lease and its registration.
With `endpoints`, `KeptLease` refreshes from a thread with its own loop and etcd
connection; the same hold loses an in-loop lease (checked too, so the test
shows what the thread changes).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

from tamto_common.config import parse_endpoints
from tamto_common.membership import KeptLease, Member, Registration, connect_etcd
from tamto_testing.waiting import eventually

TTL_S = 2
HOLD_S = 2.5 * TTL_S


@pytest.mark.parametrize("threaded", [True, False], ids=["own-thread", "in-loop"])
async def test_a_held_loop_loses_the_lease_only_when_kept_in_the_loop(
    etcd_endpoint: str, threaded: bool
) -> None:
    endpoints = parse_endpoints(etcd_endpoint)
    etcd = await connect_etcd(endpoints)
    key = f"/tamto/test/kept-lease/{uuid.uuid4().hex}".encode()
    try:
        async with KeptLease(etcd, TTL_S, endpoints=endpoints if threaded else None) as kept:
            await etcd.put(key, b"held", lease=kept.lease)
            time.sleep(HOLD_S)  # noqa: ASYNC251 - the held loop under test
            kept_key = await etcd.get(key)
            if threaded:
                assert kept_key is not None, "the key's lease was kept through the held loop"
                assert kept.valid()
            else:
                assert kept_key is None, "an in-loop keep-alive cannot run while the loop is held"
    finally:
        await etcd.delete(key)
        await etcd.close()


async def test_a_lease_whose_validity_lapsed_is_left_to_expire_and_replaced(
    etcd_endpoint: str,
) -> None:
    """Over a slow link keep-alives can reach etcd (renewing the lease there) while their
    answers come too late to keep it `valid()` here, and the owner gives up what it
    protects: the old lease must then expire in etcd, so that others can take over, and
    a new one is granted (`on_new_lease`)."""
    endpoints = parse_endpoints(etcd_endpoint)
    etcd = await connect_etcd(endpoints)
    new_leases: list[int] = []

    async def on_new_lease(lease: Any) -> None:
        new_leases.append(lease.id)

    try:
        async with KeptLease(etcd, TTL_S, on_new_lease, endpoints=endpoints) as kept:
            old = kept.lease
            key = f"/tamto/test/lapsed-lease/{uuid.uuid4().hex}".encode()
            await etcd.put(key, b"held", lease=old)
            kept._valid_until = time.monotonic()  # as if no answer came back in time
            await eventually(lambda: kept.lease.id != old.id, 10, "a new lease")
            assert new_leases == [old.id, kept.lease.id]  # the first grant's, then the new
            await eventually(
                lambda: _gone(etcd, key), TTL_S + 5, "the lapsed lease to expire in etcd"
            )
            assert kept.valid()
    finally:
        await etcd.close()


async def _gone(etcd: Any, key: bytes) -> bool:
    return await etcd.get(key) is None


class PutFailsOnce(Registration):
    """A registration whose next put fails (an etcd put timed out under load)."""

    fail_next = False

    async def _put(self, lease: Any) -> None:
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("the put timed out")
        await super()._put(lease)


async def test_a_new_lease_whose_put_failed_is_not_adopted_and_the_put_is_retried(
    etcd_endpoint: str,
) -> None:
    """A registration whose lease lapsed grants a new one and puts its key with it. When
    that put fails, keeping the new lease alive would leave the member unregistered for
    good (its old lease expires, nothing puts the key again): the new lease must be
    dropped and the grant and the put tried again."""
    endpoints = parse_endpoints(etcd_endpoint)
    etcd = await connect_etcd(endpoints)
    member = Member(
        "auth", f"auth-{uuid.uuid4().hex[:8]}", "127.0.0.1:1", "", "0", os.getpid(), 0.0
    )
    try:
        registration = PutFailsOnce(etcd, member, TTL_S, endpoints)
        async with registration:
            old = registration.lease
            registration.fail_next = True
            registration._valid_until = time.monotonic()  # as if no answer came back in time

            async def registered_with_a_new_lease() -> bool:
                found = await etcd.get(member.key.encode())
                return found is not None and found.lease == registration.lease.id != old.id

            await eventually(registered_with_a_new_lease, 10, "the key put with a new lease")
            assert not registration.fail_next, "the failing put was tried"
    finally:
        await etcd.close()
