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
- `given_back` / `settled`: delivered offsets came back for redelivery, or are done;
- `drain_gated`: do fresh messages wait for the earlier ledgers to be acked?

A strategy never changes its subscription's state itself: it asks (`Host`) for
the due runs (`take_due`), to keep a run waiting (`wait`), to move the position
past what it read (`advance`), and to deliver (`serve`, `hand`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Protocol

from tamto_router.acks import normalized
from tamto_router.runs import without

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tamto_router.acks import AckSet
    from tamto_router.consumers import Consumers
    from tamto_router.model import Batch, SubscriptionType
    from tamto_router.partition_log import PartitionLog
    from tamto_router.runs import Run
    from tamto_router.slots import ConsumerSlot


class Host(Protocol):
    """The part of a subscription a strategy uses (`Subscription` is the one host)."""

    @property
    def name(self) -> str: ...

    @property
    def log(self) -> PartitionLog: ...

    @property
    def acks(self) -> AckSet: ...

    @property
    def consumers(self) -> Consumers: ...

    @property
    def position(self) -> int:
        """The next offset never delivered."""
        ...

    @property
    def read_max(self) -> int:
        """The most messages one read asks storage for."""
        ...

    def waiting(self) -> Iterator[tuple[int, int]]:
        """The offset runs waiting to be delivered again (due or not), as (first, last)."""
        ...

    def take_due(self, now: float) -> list[Run]:
        """Take the waiting runs due by `now` out of the waiting ones, by first offset."""
        ...

    def wait(self, run: Run) -> None:
        """Keep `run` waiting to be delivered (again) from `run.due` on."""
        ...

    def advance(self, to: int) -> None:
        """Fresh messages below `to` were handed out (or held back as waiting runs)."""
        ...

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
    #: Whether a new owner's fresh messages wait until every message of the earlier
    #: ledgers was acked (`partition_log.drain_gate`), so that a key's order holds
    #: across a move. Every type but shared (which promises no order) keeps order.
    drain_gated: ClassVar[bool] = True

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

    @abstractmethod
    def pick(self, consumers: Consumers) -> ConsumerSlot | None:
        """The consumer to serve now, or None (none may receive now)."""

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
