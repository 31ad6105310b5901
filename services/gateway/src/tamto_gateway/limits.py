"""Per-connection limit on consume streams at the gateway.

One client connection (one HTTP/2 connection, which gRPC names by its peer
address) may hold at most `max_consumers_per_connection` consume streams at
once; the next is refused with RESOURCE_EXHAUSTED naming the limit, before any
router is asked to attach it. Routers limit consumers per subscription on their
side (`max_consumers_per_subscription`).
"""

from __future__ import annotations

from tamto_common.errors import ResourceExhausted


class ConsumersPerConnection:
    """Open consume streams counted by the client connection (peer) they came on."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def enter(self, peer: str) -> None:
        """Count one more stream on `peer`; `ResourceExhausted` if it has the limit already."""
        held = self._open.get(peer, 0)
        if self.limit and held >= self.limit:
            raise ResourceExhausted(
                f"connection {peer} already has {held} consume streams open, the limit "
                f"(max_consumers_per_connection={self.limit})"
            )
        self._open[peer] = held + 1

    def leave(self, peer: str) -> None:
        """One stream of `peer` ended."""
        held = self._open.get(peer, 0) - 1
        if held > 0:
            self._open[peer] = held
        else:
            self._open.pop(peer, None)
