"""Consume sessions follow their partitions' owners.

A client's consume session is attached to the routers that owned its partitions
when it opened (`tamto_gateway.consume.FanOut`), and it moves only when one of
those router sessions ends. A router that is cut off by the network ends
nothing: its stream just goes quiet until gRPC's keep-alive declares the
connection dead, 10-15 s later (`tamto_common.channels`), while another router
takes its partitions over as soon as the cut-off router's lease ran out (the
lease TTL). The consumer got nothing from those partitions in between, and when
the cut healed within the keep-alive's time, still nothing until TCP's
retransmission backoff let the old connection through again.

So the gateway follows what it routes by (its member directory and placement
view, `tamto_gateway.routing.Routes`): after every change, and every
`CHECK_S` besides,

- a consume session reading a partition that is another router's now ends
  UNAVAILABLE ("moved"): the SDK subscribes again at once, through the new
  owners, and the routers redeliver what was left unacked;
- the consume mux to a router that left the directory is closed (its sessions
  end UNAVAILABLE, as when the mux fails): a router that comes back gets a new
  connection, not the old one that may still be waiting out TCP's backoff.

One task for the gateway, whatever the number of sessions: a crowd of consumers
costs a set of weak references, and a look at each session's owners when the view
changed (the tick looks only if it did).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Protocol, Self

import structlog

from tamto_common.tasks import cancel_and_wait
from tamto_gateway.consume_mux import Muxes
from tamto_gateway.routing import Routes

log = structlog.get_logger(__name__)

#: How often the sessions' owners are looked at besides after each change (a change
#: missed while a look was in progress is seen then).
CHECK_S = 1.0

#: The owner of (stream, partition) by the gateway's current view; None while unknown.
OwnerNow = Callable[[str, int], str | None]


class Follows(Protocol):
    """A consume session that can be told its partitions' current owners."""

    def follow(self, owner_now: OwnerNow) -> None:
        """End the session if one of its partitions is another router's now."""


class ConsumeFollower:
    """The gateway's consume sessions, kept on their partitions' owners (module
    docstring). An async context manager: the following runs inside it."""

    def __init__(self, routes: Routes, muxes: Muxes) -> None:
        self._routes = routes
        self._muxes = muxes
        self._sessions: weakref.WeakSet[Follows] = weakref.WeakSet()
        self._task: asyncio.Task[None] | None = None
        self._checked: tuple[object, object] | None = None  # the view last looked at

    def add(self, session: Follows) -> None:
        self._sessions.add(session)

    def discard(self, session: Follows) -> None:
        self._sessions.discard(session)

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run(), name="consume-follower")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await cancel_and_wait(self._task)

    async def _run(self) -> None:
        while True:
            await self._routes.next_change(CHECK_S)
            try:
                await self.check()
            except Exception as exc:  # the next change or tick looks again
                log.warning("following consume sessions failed", error=repr(exc))

    async def check(self) -> None:
        """Close the muxes of routers gone from the directory, and end the sessions
        whose partitions moved."""
        view = self._routes.view()
        last = self._checked
        if last is not None and view[0] is last[0] and view[1] is last[1]:
            return
        self._checked = view
        routers = self._routes.router_addresses()
        if routers:  # an empty view (etcd restarting) says nothing about one router
            await self._muxes.close_all_but(routers)
        for session in list(self._sessions):
            session.follow(self._routes.owner_now)
