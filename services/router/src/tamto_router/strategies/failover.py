"""Failover subscriptions: consumers ordered by (name, arrival); only the first receives.

When it leaves, the subscription gives what it held unacked back, and the next
in order receives it (`Consumers.first` keeps the order in O(log n)).
"""

from __future__ import annotations

from tamto_router.model import SubscriptionType
from tamto_router.strategies.base import OneAtATime


class Failover(OneAtATime):
    type = SubscriptionType.FAILOVER
