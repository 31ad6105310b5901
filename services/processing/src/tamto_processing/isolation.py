"""Finding the messages a function fails on, in few calls of the function.

When the code raises on a batch, the runner must publish what the good messages give
and dead-letter the bad ones. Halving alone (split every failing part in two until
single messages remain) costs about ``2 * bad * log2(n / bad)`` calls: fine for one bad
message in 2,000 (about 22 calls), but when many are bad nearly every part fails down
to the single messages and it costs ~2n calls. So a failing part is halved while bad
messages look sparse, and tried message by message once they look dense: when the
part is small (`LEAF` messages), or when both halves of a part of at most `DENSE`
messages fail. However many are bad that is at most about ``n + n / 8`` calls (the
parts down to `DENSE` messages, then each message once), and it stays near
``2 * bad * log2(n)`` when few are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

#: A failing part this small is tried message by message.
LEAF = 8
#: A failing part at most this large whose both halves fail: its halves go message by message.
DENSE = 64
#: The longest error text kept for a dead letter.
MAX_ERROR = 500

T = TypeVar("T")
#: The code on rows ``[start, stop)`` of the batch: its result, or it raises.
Run = Callable[[int, int], T]


@dataclass(slots=True)
class Isolated(Generic[T]):
    """The parts the code succeeded on and the rows it failed on, with its errors."""

    #: ``(start, stop, result)`` per succeeding part, in row order.
    good: list[tuple[int, int, T]] = field(default_factory=list)
    #: ``(row, error)`` per failing message, in row order.
    bad: list[tuple[int, str]] = field(default_factory=list)
    #: How many times the code ran (the first, failing call on the whole batch included).
    calls: int = 0


def describe(exc: BaseException) -> str:
    """A dead letter's error text: the exception's type and message, cut."""
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR]


def run_isolating(run: Run[T], n: int) -> Isolated[T]:
    """`run` on the whole batch of `n` rows, and on parts of it when that fails."""
    found: Isolated[T] = Isolated()
    error = _attempt(run, 0, n, found)
    if error is not None:
        _isolate(run, n, error, found)
    found.good.sort(key=lambda part: part[0])
    found.bad.sort()
    return found


def _isolate(run: Run[T], n: int, error: str, found: Isolated[T]) -> None:
    failing = [(0, n, error)]
    while failing:
        start, stop, error = failing.pop()
        if stop - start == 1:
            found.bad.append((start, error))
            continue
        if stop - start <= LEAF:
            _one_by_one(run, start, stop, found)
            continue
        middle = (start + stop) // 2
        halves = [(start, middle), (middle, stop)]
        failed = [(a, b, e) for a, b in halves if (e := _attempt(run, a, b, found)) is not None]
        if len(failed) == 2 and stop - start <= DENSE:
            for a, b, _ in failed:
                _one_by_one(run, a, b, found)
        else:
            failing.extend(failed)


def _one_by_one(run: Run[T], start: int, stop: int, found: Isolated[T]) -> None:
    for row in range(start, stop):
        error = _attempt(run, row, row + 1, found)
        if error is not None:
            found.bad.append((row, error))


def _attempt(run: Run[T], start: int, stop: int, found: Isolated[T]) -> str | None:
    """Runs the code on ``[start, stop)``: None and its result kept, or its error."""
    found.calls += 1
    try:
        result = run(start, stop)
    except Exception as exc:  # user code and bad data: isolated, never fatal
        return describe(exc)
    found.good.append((start, stop, result))
    return None
