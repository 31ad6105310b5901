"""A consumer's credit window: how many messages may be buffered or in flight.

A consumer's speed is bounded by its window over the credit round trip: a
grant travels SDK → gateway → router and the messages it allows travel back,
so 1,000 messages (the old fixed default) at a few milliseconds a round trip
kept a fast `async for` loop waiting on credit, not on messages, and capped
delivered batches at half the window (docs/benchmarks.md, per-message
consuming). A window the application sets (`credits=`) stays as set. Without
one it starts at `START` and doubles whenever the application finds nothing
buffered after a whole window came without a pause in the traffic (no wait for
a delivery longer than `PAUSE_S`): messages were there and the window, not the
application or the traffic, was the limit. It stops at `MOST` messages and at
`MOST_BYTES` at the largest mean message size seen. A slow handler never empties
its buffer, so it never holds more than `START`; a trickle of traffic pauses
before a window's worth came, so an idle consumer of a shared subscription does
not grow a window that would take a later burst from the subscription's other
consumers. (Growing on every empty buffer after half a window, without counting
over pauses, barely grew: a fast loop empties its buffer after each delivery.)
"""

from __future__ import annotations

import time
from typing import Final

__all__ = ["CreditWindow"]

#: The window a consumer starts with when the application sets none.
START: Final = 1000
#: The most messages an automatic window grows to.
MOST: Final = 16_000
#: The most bytes (at the largest mean message size seen) an automatic window allows.
MOST_BYTES: Final = 32 << 20
#: A wait for a delivery longer than this is a pause in the traffic: counting restarts.
PAUSE_S: Final = 0.05


class CreditWindow:
    """The size of a consumer's window, and when it grows."""

    def __init__(self, credits: int | None) -> None:
        if credits is not None and credits <= 0:
            raise ValueError("credits must be positive")
        self.size = credits if credits is not None else START
        self._automatic = credits is None
        self._message_bytes = 1
        #: Messages delivered since the window last grew or the traffic paused.
        self._came = 0
        #: When the application last found its buffer empty (monotonic; 0: not waiting).
        self._empty_at = 0.0

    @property
    def refill_at(self) -> int:
        """Messages taken after which more credit is granted: half the window."""
        return max(1, self.size // 2)

    def delivered(self, nbytes: int, count: int) -> None:
        """A delivery of `count` messages in `nbytes` came (sizes the byte limit)."""
        if count <= 0:
            return
        self._message_bytes = max(self._message_bytes, nbytes // count)
        if self._empty_at and time.monotonic() - self._empty_at > PAUSE_S:
            self._came = 0  # the traffic paused: it, not the window, was the limit
        self._empty_at = 0.0
        self._came += count

    def grow(self) -> int:
        """The application found its buffer empty: the extra credit to grant (the
        window doubles within its limits when it was the limit), 0 for none."""
        if not self._automatic:
            return 0
        if not self._empty_at:
            self._empty_at = time.monotonic()
        if self._came < self.size:
            return 0
        most = min(MOST, max(START, MOST_BYTES // self._message_bytes))
        extra = min(self.size, most - self.size)
        if extra <= 0:
            return 0
        self.size += extra
        self._came = 0
        return extra
