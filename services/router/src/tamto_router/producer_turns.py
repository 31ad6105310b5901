"""The order of an idempotent producer's batches when several are in flight at once.

A producer of the SDK keeps up to five batches in flight per partition (Kafka's
idempotent producer does the same), so a message no longer waits a whole round
trip for the batch ahead of it. They normally arrive in the order sent, but a
lost connection, a retry, the gateway and the direct path side by side, or a
partition moving can make a batch arrive before the one sent ahead of it. Each
batch names its producer and its highest generated sequence number, and the
previous one's while that was unanswered (`ProducerOrder`); a partition's log
sequences it only once that one is sequenced: it holds it for up to
`HOLD_S`, then refuses it with a retriable UNAVAILABLE, and the producer sends it
again. A retry of a batch already sequenced passes (the dedup window answers it
with its original offsets), so a retry never stores twice and order per key holds.

What is remembered is the highest sequence number sequenced per producer, for the
most recent `MAX_PRODUCERS` producers; a new owner starts empty, and holds a batch
until the producer's earlier batch (or its retry) arrives. Forgetting a producer
costs a retry at worst: the producer drops `after_sequence` once it holds the
answer to the batch it named.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from tamto_common.errors import TamtoError, Unavailable
from tamto_router.model import ProducerOrder

#: How long a batch that arrived before its producer's earlier one is held.
HOLD_S: Final = 2.0
#: Producers remembered per partition (the least recently seen are forgotten).
MAX_PRODUCERS: Final = 10_000


class ProducerTurns:
    """The highest sequence number sequenced per producer on one partition, and the
    batches waiting for their turn."""

    def __init__(self) -> None:
        self._highest: OrderedDict[str, int] = OrderedDict()
        self._moved = asyncio.Event()

    def ready(self, order: ProducerOrder) -> bool:
        """Whether the batch ahead of `order`'s (if any) is sequenced."""
        after = order.after_sequence
        return after is None or self._highest.get(order.producer, -1) >= after

    async def wait(self, order: ProducerOrder, failure: Callable[[], TamtoError | None]) -> None:
        """Return once `order`'s batch may be sequenced; raises the log's failure, or
        `Unavailable` (retriable) when its producer's earlier batch did not come
        within `HOLD_S`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HOLD_S
        while not self.ready(order):
            error = failure()
            if error is not None:
                raise error
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Unavailable(
                    f"producer {order.producer}'s batch after sequence {order.after_sequence} "
                    "arrived before that one: send it again"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), remaining)

    def sequenced(self, order: ProducerOrder) -> None:
        """`order`'s batch is sequenced (stored, or answered as a duplicate)."""
        highest = self._highest
        known = highest.pop(order.producer, -1)
        highest[order.producer] = max(known, order.last_sequence)
        if len(highest) > MAX_PRODUCERS:
            highest.popitem(last=False)
        self.wake()

    def wake(self) -> None:
        """Let every held batch look again (one was sequenced, or the log failed)."""
        self._moved.set()
        self._moved = asyncio.Event()
