"""Multicast subscriptions: every consumer, by name, gets every message.

Each consumer name has a subscription of its own inside the router (its own
cursor, `consume.SubscribeSpec.cursor_name`), which behaves as an exclusive
one: a second connection under the same name is refused.
"""

from __future__ import annotations

from tamto_common.errors import FailedPrecondition
from tamto_router.model import SubscriptionType
from tamto_router.strategies.base import Host
from tamto_router.strategies.exclusive import Exclusive


class Multicast(Exclusive):
    """One consumer name's own subscription: exclusive to that name."""

    type = SubscriptionType.MULTICAST

    def admit(self, host: Host) -> None:
        raise FailedPrecondition(
            f"multicast consumer {host.name!r} on {host.log.stream}/{host.log.partition} is "
            "already connected (consumer names must be unique)"
        )
