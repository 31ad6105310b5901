"""Shared subscriptions: round-robin over the consumers with credit; no ordering.

Each hand-out gives a consumer at most its exact credit (load balancing needs
it), and a consumer's ack settles only what is not in flight to another one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tamto_router.model import SubscriptionType
from tamto_router.strategies.base import OneAtATime, own_only

if TYPE_CHECKING:
    from tamto_router.consumers import Consumers
    from tamto_router.runs import Run
    from tamto_router.slots import ConsumerSlot


class Shared(OneAtATime):
    type = SubscriptionType.SHARED
    drain_gated = False  # no order to keep: fresh messages flow at once after a move

    def pick(self, consumers: Consumers) -> ConsumerSlot | None:
        return consumers.next_with_credit()  # round-robin, O(1) amortized

    def budget(self, slot: ConsumerSlot) -> int | None:
        return slot.credit.available

    def ackable(
        self, ranges: list[tuple[int, int]], slot_id: int, in_flight: list[Run]
    ) -> list[tuple[int, int]]:
        return own_only(ranges, slot_id, in_flight)
