"""Finding the messages a function fails on: every one found once, in few calls."""

from __future__ import annotations

import math
from collections.abc import Callable

import pyarrow as pa
import pytest
from tamto_processing.isolation import LEAF, run_isolating
from tamto_processing.runner import _with_ids

Rows = list[int]


def failing_on(bad: set[int]) -> tuple[list[tuple[int, int]], Callable[[int, int], Rows]]:
    """A function over rows [start, stop) that raises if any of them is bad, and its calls."""
    calls: list[tuple[int, int]] = []

    def run(start: int, stop: int) -> Rows:
        calls.append((start, stop))
        hit = sorted(bad.intersection(range(start, stop)))
        if hit:
            raise ValueError(f"row {hit[0]} is bad")
        return list(range(start, stop))

    return calls, run


def halving_calls(n: int, bad: set[int]) -> int:
    """What plain halving (split every failing part until single rows) costs."""
    calls, parts = 0, [(0, n)]
    while parts:
        start, stop = parts.pop()
        calls += 1
        if stop - start > 1 and bad.intersection(range(start, stop)):
            middle = (start + stop) // 2
            parts += [(start, middle), (middle, stop)]
    return calls


@pytest.mark.parametrize("n", [200, 2000])
def test_when_30_percent_are_bad_each_is_found_once_in_about_n_calls(n: int) -> None:
    bad = {row for row in range(n) if row % 10 in (2, 5, 8)}
    calls, run = failing_on(bad)
    found = run_isolating(run, n)
    assert [row for row, _ in found.bad] == sorted(bad)
    assert all(error.startswith("ValueError: row") for _, error in found.bad)
    good = [row for _, _, rows in found.good for row in rows]
    assert good == sorted(set(range(n)) - bad)  # each good row once, in order
    assert found.calls == len(calls)
    assert found.calls <= n + n // 8 + 1
    assert found.calls < 0.7 * halving_calls(n, bad)  # 215 against 327 at n = 200


def test_one_bad_message_in_2000_takes_a_few_dozen_calls() -> None:
    n, bad = 2000, {1234}
    _, run = failing_on(bad)
    found = run_isolating(run, n)
    assert [row for row, _ in found.bad] == [1234]
    assert sum(stop - start for start, stop, _ in found.good) == n - 1
    assert found.calls <= 1 + 2 * math.ceil(math.log2(n / LEAF)) + LEAF


def test_a_few_scattered_bad_messages_cost_far_fewer_calls_than_one_per_message() -> None:
    n, bad = 2000, {7, 400, 401, 1500, 1999}
    _, run = failing_on(bad)
    found = run_isolating(run, n)
    assert [row for row, _ in found.bad] == sorted(bad)
    assert found.calls <= 2 * len(bad) * math.ceil(math.log2(n)) + len(bad) * LEAF


def test_a_batch_without_bad_messages_is_one_call() -> None:
    calls, run = failing_on(set())
    found = run_isolating(run, 500)
    assert (found.calls, found.bad, calls) == (1, [], [(0, 500)])


def test_every_message_bad_is_each_dead_lettered_once() -> None:
    n = 300
    _, run = failing_on(set(range(n)))
    found = run_isolating(run, n)
    assert [row for row, _ in found.bad] == list(range(n))
    assert found.good == []
    assert found.calls <= n + n // 8 + 1


def test_ids_name_the_input_position_and_rank_rows_of_one_input() -> None:
    table = pa.table(
        {
            "payload": pa.array([b"a", b"b", b"c", b"d", b"e"], pa.binary()),
            "offset": pa.array([7, 9, 7, 8, 7], pa.int64()),
        }
    )
    ids = _with_ids(table, "fn:in:2:", last_offset=9).column("id").to_pylist()
    assert ids == ["fn:in:2:7:0", "fn:in:2:9:0", "fn:in:2:7:1", "fn:in:2:8:0", "fn:in:2:7:2"]
    distinct = table.set_column(1, "offset", pa.array([3, 4, 5, 6, 7], pa.int64()))
    assert _with_ids(distinct, "f:s:0:", 7).column("id").to_pylist() == [
        f"f:s:0:{o}" for o in range(3, 8)
    ]
    no_offsets = table.drop_columns(["offset"])
    assert _with_ids(no_offsets, "f:s:0:", 9).column("id").to_pylist() == [
        f"f:s:0:9:{rank}" for rank in range(5)
    ]
