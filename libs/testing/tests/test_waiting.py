"""`eventually`: plain and async checks, the time it took, and a named timeout."""

from __future__ import annotations

import pytest

from tamto_testing.waiting import eventually


async def test_a_plain_check_is_polled_until_true() -> None:
    calls = []

    def third_time() -> bool:
        calls.append(1)
        return len(calls) >= 3

    took = await eventually(third_time, 5, "the third call", interval_s=0.001)
    assert len(calls) == 3
    assert took >= 0


async def test_an_async_check_is_awaited() -> None:
    calls = []

    async def second_time() -> bool:
        calls.append(1)
        return len(calls) >= 2

    await eventually(second_time, 5, "the second call", interval_s=0.001)
    assert len(calls) == 2


async def test_a_check_never_true_fails_naming_what_was_awaited() -> None:
    with pytest.raises(AssertionError, match=r"not within 0.05s: the impossible"):
        await eventually(lambda: False, 0.05, "the impossible", interval_s=0.01)
