"""One row per subscription: the overview an operator reaches for first.

`kafka-consumer-groups --describe --all-groups`, `pulsar-admin topics stats` and
`nats consumer report` each answer "which subscription is behind, and who is on
it" in one table. `client.subscriptions.overview()` does for a stream (or every
persistent stream): a `SubscriptionSummary` per subscription, from its describe
and the stream's stats (`tamto_sdk.subscription_info.summarize`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tamto_sdk.positions import SubscriptionType

__all__ = ["SubscriptionSummary"]


@dataclass(frozen=True, slots=True)
class SubscriptionSummary:
    """A subscription in one row, its partitions added up.

    Attributes:
        stream, subscription: which one (a multicast consumer's own cursor is
            ``"<subscription>~<consumer>"``).
        partitions: the partitions it has a cursor on.
        backlog_messages: messages not acked (exact).
        unacked: messages delivered and not acked (in flight).
        publish_rate: messages per second published into its partitions over the
            last minute: how fast its backlog grows when nobody consumes.
        consumers: the attached consumers' names, each once ("" for no name).
        oldest_unacked_age_s: the age of the oldest message not acked (None: none).
        dead_lettered: messages moved to the dead-letter stream since its routers
            loaded it.
        type: the type of the consumers attached (None: none are).
    """

    stream: str
    subscription: str
    partitions: int
    backlog_messages: int
    unacked: int
    publish_rate: float
    consumers: tuple[str, ...]
    oldest_unacked_age_s: float | None
    dead_lettered: int
    type: SubscriptionType | None
