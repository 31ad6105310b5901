"""Waiting for a condition in async tests: poll it against a deadline, never a fixed sleep."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

from tamto_common.polling import poll


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.02,
) -> float:
    """Poll `check` (plain or async) until it is true; return the seconds it took.

    AssertionError naming `what` once `timeout_s` passed without it; an exception the
    check raises is raised at once (`tamto_common.polling`).
    """
    return await poll(check, timeout_s, what, interval_s=interval_s)


def long_tests_enabled() -> bool:
    """True when TAMTO_LONG_TESTS=1: campaigns run at their acceptance size instead of CI's.

    docs/testing.md lists each long campaign and what it scales.
    """
    return os.environ.get("TAMTO_LONG_TESTS", "") == "1"
