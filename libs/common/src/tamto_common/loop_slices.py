"""Loops that may run long give the event loop back, a slice at a time.

A loop over one request's elements (a nack's 10,000 runs redelivered, each a
read and a slice of a batch) awaits calls that often finish without yielding
(a cached batch): run through at once, it held a router's event loop over a
second, and every other client's publish waited. Such a loop calls `pause`
after each element; once it has held the loop for `SLICE_S`, `pause` lets the
other tasks run before it goes on. docs/validation.md states the bound.
"""

from __future__ import annotations

import asyncio
import time

#: The longest a sliced loop holds the event loop before letting others run.
SLICE_S = 0.02


class LoopSlices:
    """`await slices.pause()` after each element of a long loop."""

    def __init__(self, slice_s: float = SLICE_S) -> None:
        self._slice_s = slice_s
        self._until = time.monotonic() + slice_s

    async def pause(self) -> None:
        """Let the other tasks run if this slice of the loop is used up."""
        if time.monotonic() >= self._until:
            await asyncio.sleep(0)
            self._until = time.monotonic() + self._slice_s
