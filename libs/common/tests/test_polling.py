"""The one polling loop (`tamto_common.polling`): its three decisions, async and blocking."""

from __future__ import annotations

import itertools

import pytest

from tamto_common.polling import poll, poll_blocking


async def test_poll_returns_once_true_and_names_what_at_the_deadline() -> None:
    counter = itertools.count()
    assert await poll(lambda: next(counter) >= 3, 5, "three polls", interval_s=0.001) >= 0
    with pytest.raises(TimeoutError, match=r"not within 0\.05s: never"):
        await poll(lambda: False, 0.05, "never", error=TimeoutError)


async def test_a_raising_check_raises_at_once_unless_retried() -> None:
    def broken() -> bool:
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError):
        await poll(broken, 5, "broken")
    with pytest.raises(AssertionError, match="still broken"):
        await poll(broken, 0.05, "still broken", retry_errors=True)


def test_blocking_shares_the_decisions() -> None:
    counter = itertools.count()
    poll_blocking(lambda: next(counter) >= 2, 5, "two polls", interval_s=0.001)

    def broken() -> bool:
        raise OSError("no")

    with pytest.raises(OSError, match="no"):
        poll_blocking(broken, 5, "broken")
    with pytest.raises(TimeoutError, match=r"not within 0\.05s: down"):
        poll_blocking(broken, 0.05, "down", retry_errors=True, error=TimeoutError)
