"""What other gateways announced of their ephemeral consuming entities.

Gateways announce their entities on the bus (`INTEREST_SUBJECT`) on every change
and every `ANNOUNCE_S`; an announcement holds for 3x as long. This module keeps
the other gateways' latest announcements and answers the hub's questions about
them (is a stream consumed elsewhere, is a group served elsewhere, which gateway
holds a member matching a topic, which entities a topic reaches). Split from
`tamto_gateway.ephemeral` (the hub: bus routing and publishing), which sends the
announcements and feeds the ones it receives here.
"""

from __future__ import annotations

import json
import time
from typing import Final

import structlog
from nats.aio.msg import Msg

from tamto_common.errors import InvalidArgument
from tamto_gateway.ephemeral_entity import EntityKey
from tamto_gateway.topics import TopicPattern

log = structlog.get_logger(__name__)

INTEREST_SUBJECT: Final = "tamto.eph-interest"
#: Gateways re-announce their entities this often; an announcement lasts 3x as long.
ANNOUNCE_S: Final = 2.0

#: One gateway's announced entities: stream -> [(key, pattern)], patterns parsed
#: once per announcement, not per publish.
_Streams = dict[str, list[tuple[EntityKey, TopicPattern]]]


def encode_announcement(gateway: str, streams: dict[str, list[list[str]]]) -> bytes:
    """The bus message announcing `gateway`'s entities (`interest_of`)."""
    return json.dumps({"gateway": gateway, "streams": streams}).encode()


class RemoteInterest:
    """Other gateways' announced entities, each announcement until it expires."""

    def __init__(self, own_id: str) -> None:
        self._own_id = own_id
        # gateway id -> (expiry, stream -> [(key, pattern)])
        self._remote: dict[str, tuple[float, _Streams]] = {}

    def announced_elsewhere(self, stream: str) -> bool:
        """Whether another gateway announced a consumer of `stream` (and it holds)."""
        now = time.monotonic()
        return any(expires >= now and stream in s for expires, s in self._remote.values())

    def has(self, key: EntityKey) -> bool:
        """Whether another gateway announced entity `key` (and the announcement holds)."""
        now = time.monotonic()
        return any(
            expires >= now and any(k == key for k, _ in streams.get(key[0], ()))
            for expires, streams in self._remote.values()
        )

    def add_matching(self, entities: set[EntityKey], stream: str, topic: str) -> None:
        """Add to `entities` the keys other gateways announced for `stream` whose
        pattern matches `topic`; forgets the announcements that expired."""
        now = time.monotonic()
        for gateway, (expires, streams) in list(self._remote.items()):
            if expires < now:
                del self._remote[gateway]
                continue
            for key, pattern in streams.get(stream, []):
                if key not in entities and pattern.matches(topic):
                    entities.add(key)

    def gateway_for(self, key: EntityKey, topic: str) -> str | None:
        """A gateway that announced a member of group `key` whose pattern matches
        `topic` (and the announcement holds), or None."""
        now = time.monotonic()
        for gateway, (expires, streams) in list(self._remote.items()):
            if expires >= now and any(
                k == key and pattern.matches(topic) for k, pattern in streams.get(key[0], ())
            ):
                return gateway
        return None

    def take(self, msg: Msg) -> None:
        """Take in an announcement (one of this gateway's own is ignored)."""
        try:
            body = json.loads(msg.data)
            gateway = str(body["gateway"])
            streams = {
                str(s): [
                    ((str(s), str(g), "" if g else str(n)), TopicPattern.parse(str(p)))
                    for g, p, n in rows
                ]
                for s, rows in body["streams"].items()
            }
        except (ValueError, KeyError, TypeError, InvalidArgument) as exc:
            log.warning("bad ephemeral interest announcement", error=str(exc))
            return
        if gateway != self._own_id:
            self._remote[gateway] = (time.monotonic() + 3 * ANNOUNCE_S, streams)
