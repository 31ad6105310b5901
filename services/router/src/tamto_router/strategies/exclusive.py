"""Exclusive subscriptions: one consumer; a second one attaching is refused."""

from __future__ import annotations

from tamto_common.errors import FailedPrecondition
from tamto_router.model import SubscriptionType
from tamto_router.strategies.base import Host, OneAtATime


class Exclusive(OneAtATime):
    type = SubscriptionType.EXCLUSIVE

    def admit(self, host: Host) -> None:
        raise FailedPrecondition(
            f"subscription {host.name!r} on {host.log.stream}/{host.log.partition} already has "
            "a consumer (exclusive)"
        )
