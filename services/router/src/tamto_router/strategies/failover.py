"""Failover subscriptions: consumers ordered by (name, arrival); only the first receives.

The first in order is the active consumer: it gets every message while it has
credit, and the others none, however much credit they have. When it leaves, the
subscription gives what it held unacked back, and the next in order becomes the
active one and receives it (`Consumers.first` keeps the order in O(log n)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tamto_router.model import SubscriptionType
from tamto_router.strategies.base import OneAtATime, first_with_credit

if TYPE_CHECKING:
    from tamto_router.consumers import Consumers
    from tamto_router.slots import ConsumerSlot


class Failover(OneAtATime):
    type = SubscriptionType.FAILOVER

    def pick(self, consumers: Consumers) -> ConsumerSlot | None:
        """The active consumer (first by name, then arrival) if it has credit; never
        another one, even when the active one has none: standbys only stand by."""
        return first_with_credit(consumers)
