"""A lease kept on its own thread survives an event loop held longer than its TTL.

Issue 17: a router whose event loop was saturated by a crowd of consumers
missed its etcd keep-alive and lost its ownership lease and its registration.
With `endpoints`, `KeptLease` refreshes from a thread with its own loop and etcd
connection; the same hold loses an in-loop lease (checked too, so the test
shows what the thread changes).
"""

from __future__ import annotations

import time
import uuid

import pytest

from tamto_common.config import parse_endpoints
from tamto_common.membership import KeptLease, connect_etcd

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
