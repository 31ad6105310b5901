"""`until_reachable`: a starting service retries what says "not reachable now", quickly and
boundedly, and surfaces anything else at once."""

from __future__ import annotations

import aetcd.exceptions as etcd_errors
import pytest

from tamto_common.errors import InvalidArgument, Unavailable
from tamto_common.startup import backoff_s, until_reachable
from tamto_protocol.reconnect import MAX_RECONNECT_BACKOFF_MS


async def test_transient_failures_are_retried_until_the_dependency_answers() -> None:
    failures = [
        etcd_errors.ConnectionFailedError("refused"),
        ConnectionRefusedError(),
        Unavailable("NATS not reachable"),
    ]

    async def attempt() -> str:
        if failures:
            raise failures.pop(0)
        return "connected"

    assert await until_reachable("etcd", attempt, deadline_s=30) == "connected"
    assert not failures


async def test_an_error_that_is_not_transient_surfaces_at_once() -> None:
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise InvalidArgument("bad key")

    with pytest.raises(InvalidArgument):
        await until_reachable("etcd", attempt, deadline_s=30)
    assert calls == 1


async def test_it_gives_up_with_unavailable_after_the_deadline() -> None:
    async def attempt() -> None:
        raise etcd_errors.ConnectionTimeoutError("paused")

    with pytest.raises(Unavailable, match=r"etcd not reachable within 0\.3 s"):
        await until_reachable("etcd", attempt, deadline_s=0.3)


def test_backoff_follows_the_channels_reconnect_policy() -> None:
    longest = MAX_RECONNECT_BACKOFF_MS / 1000 * 1.2
    assert all(0 < backoff_s(n) <= longest for n in range(100))
    assert backoff_s(0) <= 0.12
