"""Exclusive subscriptions: one consumer; a second one attaching is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tamto_common.errors import FailedPrecondition
from tamto_router.model import SubscriptionType
from tamto_router.strategies.base import Host, OneAtATime, first_with_credit

if TYPE_CHECKING:
    from tamto_router.consumers import Consumers
    from tamto_router.slots import ConsumerSlot


class Exclusive(OneAtATime):
    type = SubscriptionType.EXCLUSIVE

    def admit(self, host: Host) -> None:
        raise FailedPrecondition(
            f"subscription {host.name!r} on {host.log.stream}/{host.log.partition} already has "
            "a consumer (exclusive)"
        )

    def pick(self, consumers: Consumers) -> ConsumerSlot | None:
        """The one consumer, if it has credit."""
        return first_with_credit(consumers)
