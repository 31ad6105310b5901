"""The one interface every subscription type implements, and what it may use of its subscription.

A `Subscription` keeps what every type shares: the cursor, the runs in flight
and pending, redelivery, dead letters and the dispatcher task. It asks its
strategy (one per type, picked when a consumer attaches to an empty
subscription) only the questions whose answer depends on the type:

- `admit`: may one more consumer join those attached?
- `keyed`: are the consumers placed on a hash ring of message keys?
- `dispatch`: one round of delivery: which consumer gets which messages;
- `budget`: how many messages one hand-out may give a consumer;
- `ackable`: which part of a consumer's ack applies;
- `given_back` / `settled`: delivered offsets came back for redelivery, or are done.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Protocol

from tamto_router.acks import normalized
from tamto_router.runs import without

if TYPE_CHECKING:
    from tamto_router.acks import AckSet
    from tamto_router.consumers import Consumers
    from tamto_router.model import Batch, SubscriptionType
    from tamto_router.partition_log import PartitionLog
    from tamto_router.runs import Run
    from tamto_router.slots import ConsumerSlot


class Host(Protocol):
    """The part of a subscription a strategy uses (`Subscription` is the one host)."""

    name: str
    log: PartitionLog
    acks: AckSet
    consumers: Consumers
    in_flight: list[Run]
    pending: list[Run]
    #: The next offset never delivered.
    position: int
    #: The most messages one read asks storage for.
    read_max: int

    async def read(self, first: int, want: int) -> list[Batch] | None:
        """Stored batches from `first`; None when retention moved the start past it."""
        ...

    def fresh_end(self) -> int:
        """The offset below which fresh messages may be delivered now (the drain gate)."""
        ...

    async def serve(self, slot: ConsumerSlot, now: float) -> bool:
        """Send `slot` the first due redelivery, else fresh data; False when there is none."""
        ...

    def hand(
        self,
        slot: ConsumerSlot,
        piece: Batch,
        count: int,
        now: float,
        offsets: list[int] | None = None,
    ) -> None:
        """Deliver `piece` (delivery number `count`) to `slot` and track it in flight."""
        ...


class Strategy(ABC):
    """What one subscription type decides; defaults fit a single active consumer."""

    type: ClassVar[SubscriptionType]
    #: Whether consumers are placed on a consistent-hash ring of keys (`Consumers.owner`).
    keyed: ClassVar[bool] = False

    def admit(self, host: Host) -> None:
        """Raise FailedPrecondition if one more consumer may not join those attached.

        Called only when some are attached (the first one is always admitted) and
        they are of this type.
        """
        return None

    @abstractmethod
    async def dispatch(self, host: Host, now: float) -> bool:
        """One round of delivery; True when anything moved (the dispatcher looks again)."""

    def budget(self, slot: ConsumerSlot) -> int | None:
        """How many messages `slot` may get in one hand-out; None: a whole batch may overdraw."""
        return None

    def ackable(
        self, ranges: list[tuple[int, int]], slot_id: int, in_flight: list[Run]
    ) -> list[tuple[int, int]]:
        """The part of an ack from consumer `slot_id` that applies: all of it by default."""
        return ranges

    def given_back(self, first: int, last: int) -> None:
        """Delivered offsets [first, last] come back to be delivered again."""
        return None

    def settled(self, ranges: list[tuple[int, int]]) -> None:
        """Offsets in the sorted, disjoint inclusive `ranges` are done (acked or
        dead-lettered)."""
        return None


class OneAtATime(Strategy):
    """A type that hands each run to one consumer it picks per round (all but key-shared)."""

    def pick(self, consumers: Consumers) -> ConsumerSlot | None:
        """The consumer to serve now, or None: by default the active one, if it has credit."""
        return first_with_credit(consumers)

    async def dispatch(self, host: Host, now: float) -> bool:
        slot = self.pick(host.consumers)
        return slot is not None and await host.serve(slot, now)


def first_with_credit(consumers: Consumers) -> ConsumerSlot | None:
    """The active consumer (first by name, then arrival) if it has credit."""
    active = consumers.first()
    return active if active is not None and active.credit.available > 0 else None


def own_only(
    ranges: list[tuple[int, int]], slot_id: int, in_flight: list[Run]
) -> list[tuple[int, int]]:
    """`ranges` without what is in flight to another consumer than `slot_id`.

    With several consumers receiving at once, a range ack (a cumulative one,
    say) cannot settle messages another consumer has not processed: that one
    acks them, or they come back when it leaves.
    """
    held = normalized((r.first, r.last) for r in in_flight if r.consumer != slot_id)
    return without(ranges, held)
