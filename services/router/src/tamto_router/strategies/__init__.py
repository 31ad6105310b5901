"""Subscription types, one strategy each behind one interface (`base.Strategy`).

`for_type` makes the strategy of a type; a `Subscription` holds one and asks it
the type's questions (who may attach, who gets which message, which acks apply).
"""

from __future__ import annotations

from tamto_router.model import SubscriptionType
from tamto_router.strategies.base import Strategy
from tamto_router.strategies.exclusive import Exclusive
from tamto_router.strategies.failover import Failover
from tamto_router.strategies.key_shared import KeyShared
from tamto_router.strategies.multicast import Multicast
from tamto_router.strategies.shared import Shared

_BY_TYPE: dict[SubscriptionType, type[Strategy]] = {
    SubscriptionType.EXCLUSIVE: Exclusive,
    SubscriptionType.FAILOVER: Failover,
    SubscriptionType.SHARED: Shared,
    SubscriptionType.KEY_SHARED: KeyShared,
    SubscriptionType.MULTICAST: Multicast,
}


def for_type(kind: SubscriptionType) -> Strategy:
    """A new strategy for subscriptions of type `kind` (each keeps its own state)."""
    return _BY_TYPE[kind]()


__all__ = ["Strategy", "for_type"]
