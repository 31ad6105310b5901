"""Between phases the benchmark waits for quiet processes and for nothing pending
(storage's bytes not sealed yet), within a limit."""

from __future__ import annotations

from tamto_bench.harness import RssSampler


async def test_settle_waits_until_nothing_is_pending() -> None:
    reports = iter([5_000_000, 1_000, 0, 9])
    calls = 0

    async def pending() -> int:
        nonlocal calls
        calls += 1
        return next(reports)

    settled = await RssSampler().settle(pending, window_s=0.01)  # no process watched: quiet
    assert (settled.pending, calls) == (0, 3)


async def test_settle_stops_at_its_limit_and_reports_what_was_left() -> None:
    async def pending() -> int:
        return 7

    settled = await RssSampler().settle(pending, window_s=0.01, limit_s=0.05)
    assert settled.pending == 7
    assert settled.waited_s >= 0.05
