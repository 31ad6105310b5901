"""The consuming entities of ephemeral streams on one gateway, and which member
of an entity gets a batch.

Split from `tamto_gateway.ephemeral` (the hub: bus routing and publishing) so
that the entity model (a plain consumer is an entity of its own; a group is one
per (stream, group), whose bindings are its members' patterns) and its turn-taking
stand on their own, apart from the bus.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from nats.aio.subscription import Subscription

from tamto_gateway.ephemeral_consumer import EphemeralConsumer
from tamto_gateway.topics import TopicPattern

#: An entity's key: (stream, group, "") for a group, (stream, "", a uuid) for a
#: plain consumer.
EntityKey = tuple[str, str, str]


@dataclass(eq=False)
class Entity:
    """A group on this gateway (its local members, each with its own pattern), or
    one plain consumer (`pattern` is its own)."""

    key: EntityKey  # (stream, group, "") or (stream, "", a uuid)
    pattern: TopicPattern
    members: list[EphemeralConsumer] = field(default_factory=list)
    #: A group's bus subscriptions, one per distinct filter of its members' patterns.
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def group(self) -> str:
        return self.key[1]

    def matches(self, topic: str) -> bool:
        """Whether a batch of `topic` is this entity's: a group's when any of its
        members' patterns (its bindings) matches it."""
        if not self.group:
            return self.pattern.matches(topic)
        return any(m.pattern.matches(topic) for m in self.members)

    def pick(self, topic: str, bus_filter: str = "") -> EphemeralConsumer | None:
        """The member to give the next batch of `topic`: of those whose pattern matches
        it (preferring, with `bus_filter`, those whose pattern has that filter: the
        batch came on its subscription), the next in turn with room, else the least
        loaded (which then overflows)."""
        candidates = [m for m in self.members if m.pattern.matches(topic)]
        if bus_filter:
            same = [m for m in candidates if m.bus_filter == bus_filter]
            candidates = same or candidates
        if not candidates:
            return None
        start = next(self._turn) % len(candidates)
        ordered = candidates[start:] + candidates[:start]
        for member in ordered:
            if member.buffered < member.limit:
                return member
        return min(ordered, key=lambda m: m.buffered)


def interest_of(entities: dict[EntityKey, Entity]) -> dict[str, list[list[str]]]:
    """A gateway's entities by stream, as it announces them: [group, pattern,
    consumer id] rows, a group's one per distinct pattern of its members."""
    streams: dict[str, list[list[str]]] = {}
    for (stream, group, consumer_id), entity in entities.items():
        patterns = {m.pattern.text for m in entity.members}
        rows = streams.setdefault(stream, []) if patterns else []
        rows += [[group, text, consumer_id] for text in sorted(patterns)]
    return streams
