"""A consumer session as the subscriptions it is attached to see it: credit and outbox.

One session (`consume.ConsumeSession`) attaches one slot to a subscription per
partition; the subscriptions put deliveries (or the error that ends the
session) in its outbox and take from its credit.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from tamto_router.model import Delivery


class Credit:
    """Messages a consumer will still take; a batch may overdraw it once.

    `watchers` (one per subscription the consumer is attached to) hear of every
    grant, so a subscription queues the consumer for delivery without scanning.
    """

    def __init__(self) -> None:
        self.available = 0
        self.watchers: dict[int, Callable[[], None]] = {}

    def grant(self, messages: int) -> None:
        self.available += messages
        for watcher in list(self.watchers.values()):
            watcher()

    def take(self, messages: int) -> None:
        self.available -= messages


_slot_ids = itertools.count(1)


@dataclass(eq=False)
class ConsumerSlot:
    """A consumer session as subscriptions see it: its credit and its outbox."""

    name: str
    #: The consumer's id across its sessions ("": none; `SubscribeSpec.consumer_id`).
    consumer_id: str = ""
    credit: Credit = field(default_factory=Credit)
    outbox: asyncio.Queue[Delivery | BaseException] = field(default_factory=asyncio.Queue)
    id: int = field(default_factory=lambda: next(_slot_ids))
