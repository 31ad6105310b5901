"""The consumers attached to one subscription, kept so that crowds cost what they should.

A subscription may have thousands of consumers coming and going. Everything
here costs O(log n) or amortized O(1) per consumer and per delivery, never a
pass over all of them on the router's event loop:

- attach/detach: a dict by slot id, a bisect into the (name, arrival) order
  (failover's active consumer is the first), and for key-shared subscriptions
  the consumer's points added to or removed from the subscription's hash ring
  (`tamto_common.ring.HashRing.add/remove`, never a rebuild).
- shared round-robin: a queue of the consumers that had credit when last seen
  (`ready`). A grant queues its consumer; picking pops from the front, drops
  those that left or ran out of credit, and puts the one picked at the back.

Every attached consumer is counted against `max_consumers` (per subscription);
the excess is refused with RESOURCE_EXHAUSTED naming the limit. The gauge
`tamto_router_attached_consumers` counts attachments per stream (a consumer of
a 4-partition stream is attached 4 times: once per partition's subscription).
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import Gauge

from tamto_common.errors import ResourceExhausted
from tamto_common.ring import HashRing

if TYPE_CHECKING:
    from tamto_router.slots import ConsumerSlot

ATTACHED = Gauge(
    "tamto_router_attached_consumers",
    "Consumers attached to subscriptions, per stream (one per consumer and partition)",
    ["stream"],
)


class Consumers:
    """The consumer slots of one subscription; `ring` is kept only when `keyed`."""

    def __init__(self, max_consumers: int = 0, stream: str = "") -> None:
        self.max_consumers = max_consumers
        self._gauge = ATTACHED.labels(stream)
        self._slots: dict[int, ConsumerSlot] = {}
        self._order: list[tuple[str, int, int]] = []  # (name, arrival, slot id), sorted
        self._arrival_of: dict[int, int] = {}
        self._arrivals = itertools.count()
        self._ready: deque[ConsumerSlot] = deque()
        self._queued: set[int] = set()
        self._ring: HashRing | None = None

    def __len__(self) -> int:
        return len(self._slots)

    def __bool__(self) -> bool:
        return bool(self._slots)

    def __iter__(self) -> Iterator[ConsumerSlot]:
        return iter(list(self._slots.values()))

    def __contains__(self, slot: ConsumerSlot) -> bool:
        return self._slots.get(slot.id) is slot

    def add(self, slot: ConsumerSlot, keyed: bool, what: str) -> None:
        """Attach `slot`; `what` names the subscription in a refusal."""
        if self.max_consumers and len(self._slots) >= self.max_consumers:
            raise ResourceExhausted(
                f"{what} already has {len(self._slots)} consumers, the limit "
                f"(max_consumers_per_subscription={self.max_consumers})"
            )
        arrival = next(self._arrivals)
        self._slots[slot.id] = slot
        self._arrival_of[slot.id] = arrival
        bisect.insort(self._order, (slot.name, arrival, slot.id))
        slot.credit.watchers[id(self)] = partial(self.credited, slot)
        if keyed:
            if self._ring is None:
                self._ring = HashRing([])
            self._ring.add(str(slot.id))
        self._gauge.inc()
        self.credited(slot)

    def remove(self, slot: ConsumerSlot) -> bool:
        """Detach `slot`; False if it was not attached."""
        if self._slots.pop(slot.id, None) is None:
            return False
        slot.credit.watchers.pop(id(self), None)
        entry = (slot.name, self._arrival_of.pop(slot.id), slot.id)
        del self._order[bisect.bisect_left(self._order, entry)]
        if self._ring is not None:
            self._ring.remove(str(slot.id))
        self._gauge.dec()
        return True  # a queued slot is dropped from `ready` when it comes up

    def first(self) -> ConsumerSlot | None:
        """The first by (name, arrival): failover's (and exclusive's) active consumer."""
        return self._slots[self._order[0][2]] if self._order else None

    def credited(self, slot: ConsumerSlot) -> None:
        """`slot` may have credit now: queue it for round-robin if attached and not queued."""
        if slot.id in self._slots and slot.id not in self._queued and slot.credit.available > 0:
            self._queued.add(slot.id)
            self._ready.append(slot)

    def _drop_front_without_credit(self) -> None:
        while self._ready:
            front = self._ready[0]
            if self._slots.get(front.id) is front and front.credit.available > 0:
                return
            self._ready.popleft()
            self._queued.discard(front.id)

    def next_with_credit(self) -> ConsumerSlot | None:
        """Round-robin over the consumers with credit: the next one, moved to the back."""
        self._drop_front_without_credit()
        if not self._ready:
            return None
        slot = self._ready.popleft()
        self._ready.append(slot)
        return slot

    def any_credit(self) -> bool:
        """Whether some consumer has credit."""
        self._drop_front_without_credit()
        return bool(self._ready)

    def credit_up_to(self, limit: int) -> int:
        """The consumers' total credit, counted only up to `limit`."""
        total = 0
        for slot in self._ready:
            if self._slots.get(slot.id) is slot and slot.credit.available > 0:
                total += slot.credit.available
                if total >= limit:
                    break
        return total

    def by_id(self, slot_id: int) -> ConsumerSlot:
        return self._slots[slot_id]

    def owner(self, key: bytes | None) -> ConsumerSlot:
        """Key-shared: the consumer whose arc of the ring holds `key`."""
        assert self._ring is not None, "the ring is kept for key-shared subscriptions"
        return self._slots[int(self._ring.owner((key or b"").hex()))]
