"""Counting the Python steps a call takes, to test how its cost grows.

A test that one request costs O(n log n) in its size cannot time it: wall-clock
bounds flake on a loaded machine. It counts instead the lines of Python the call
runs in the modules under test (`sys.settrace` line events) at two sizes, a
number that does not depend on the machine's load, and compares the growth with
the bound's: n log n grows about 4.8 times from n to 4n at these sizes, a
quadratic cost 16 times.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any


@dataclass
class Steps:
    """Lines of Python run so far in the counted modules."""

    count: int = 0


@contextmanager
def counting_steps(*module_prefixes: str) -> Iterator[Steps]:
    """Count the lines run, within the block, in modules whose name starts with
    one of `module_prefixes` (on this thread; the tracer is removed after)."""
    steps = Steps()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            steps.count += 1
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        name = frame.f_globals.get("__name__", "")
        return local if name.startswith(module_prefixes) else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        yield steps
    finally:
        sys.settrace(previous)


def growth(small: int, large: int) -> float:
    """How many times more steps the large size took (at least one step assumed)."""
    return large / max(1, small)
