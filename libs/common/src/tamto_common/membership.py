"""Cluster membership in etcd: register under a lease, and look members up.

Each instance lives at `/tamto/members/<service>/<instance-id>` as JSON, bound
to a lease with a TTL of a few seconds that a keep-alive loop refreshes. A
process that dies stops refreshing, and its key vanishes when the lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import aetcd
import grpc
import structlog
from aetcd.rpc import rpc_pb2, rpc_pb2_grpc
from prometheus_client import Counter

from tamto_common.errors import Unavailable
from tamto_common.refreshed_view import RefreshedView
from tamto_common.startup import until_reachable
from tamto_common.tasks import cancel_and_wait
from tamto_protocol.reconnect import RECONNECT_OPTIONS

MEMBERS_PREFIX = "/tamto/members/"
log = structlog.get_logger(__name__)

LEASE_REGRANTS = Counter(
    "tamto_lease_regrants",
    "etcd leases this process granted anew because the previous one was lost (expired "
    "during an etcd outage or a pause) or could not be refreshed: the keys bound to it "
    "(its registration, a router's partition claims) were put or claimed again",
)


@dataclass(frozen=True, slots=True)
class Member:
    """One running service instance as registered in etcd."""

    service: str
    instance_id: str
    address: str
    metrics_address: str
    version: str
    pid: int
    started_at: float
    #: host:port clients dial to reach this instance directly (a router serving the
    #: direct path, docs/cluster.md section 5); empty: clients go through a gateway.
    client_address: str = ""

    @property
    def key(self) -> str:
        return f"{MEMBERS_PREFIX}{self.service}/{self.instance_id}"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Member:
        return cls(**json.loads(data))


async def connect_etcd(endpoints: list[tuple[str, int]], timeout_s: float = 10.0) -> aetcd.Client:
    """Connect to the first etcd endpoint that answers within the deadline."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        for host, port in endpoints:
            client = aetcd.Client(host=host, port=port, timeout=2, options=dict(RECONNECT_OPTIONS))
            try:
                await client.connect()
                await client.status()
                return client
            except Exception as exc:  # any failure: try the next endpoint
                last = exc
                with contextlib.suppress(Exception):
                    await client.close()
        await asyncio.sleep(0.2)
    where = ",".join(f"{h}:{p}" for h, p in endpoints)
    raise Unavailable(f"etcd at {where} not reachable: {last}")


#: How soon a failed keep-alive is tried again (etcd down, restarting or paused):
#: the lease is renewed within this long of etcd answering again.
RETRY_KEEP_ALIVE_S = 0.2


class KeptLease:
    """An etcd lease kept alive by a loop this object owns.

    The loop refreshes every third of the TTL, and every `RETRY_KEEP_ALIVE_S`
    after a failure. If the lease is lost (etcd restarted, a long pause), it
    grants a new one and calls `on_new_lease`, so the owner can put its
    lease-bound keys again.

    `valid()` says whether the lease is surely still alive in etcd: it is until
    TTL seconds after the last refresh (or grant) that etcd answered was *sent*,
    since etcd counts the TTL from when it handled it. While etcd cannot be
    reached, what the lease protects (a partition's ownership) must stop before
    `valid()` turns false, because after that someone else may take over.

    With `endpoints`, the refreshes run on a thread of their own (blocking gRPC
    on its own etcd connection), so a service whose event loop is saturated (a
    router attaching 10,000 consumers held its loop for 3.6 s, measured with
    `tamto_common.loop_lag`) still keeps its lease. Granting a new lease, and
    `on_new_lease`, stay on the service's loop.
    """

    def __init__(
        self,
        client: aetcd.Client,
        ttl_s: int,
        on_new_lease: Callable[[Any], Awaitable[None]] | None = None,
        endpoints: list[tuple[str, int]] | None = None,
    ) -> None:
        self._client = client
        self._ttl = ttl_s
        self._on_new_lease = on_new_lease
        self.lease: Any = None
        self._task: asyncio.Task[None] | None = None
        self._valid_until = -math.inf  # time.monotonic()
        self._endpoints = endpoints
        self._thread: threading.Thread | None = None
        self._thread_stop = threading.Event()

    def valid(self) -> bool:
        """Whether etcd surely still holds the lease (see the class docstring)."""
        return time.monotonic() < self._valid_until

    async def __aenter__(self) -> KeptLease:
        await self._first_grant()
        if self._endpoints is None:
            self._task = asyncio.create_task(self._keep_alive(), name="lease-keepalive")
        else:
            main_loop = asyncio.get_running_loop()
            self._thread = threading.Thread(
                target=self._keep_alive_on_thread,
                args=(main_loop,),
                name="lease-keepalive",
                daemon=True,
            )
            self._thread.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._thread is not None:
            self._thread_stop.set()
            await asyncio.to_thread(self._thread.join)
        await cancel_and_wait(self._task)
        with contextlib.suppress(Exception):
            await self.lease.revoke()

    async def _first_grant(self) -> None:
        await self._grant()

    async def _grant(self) -> None:
        """Grant a lease and adopt it once `on_new_lease` succeeded with it. A lease whose
        `on_new_lease` failed (a registration's put timed out under load) is revoked and
        not adopted: adopted, the keep-alive would keep it alive while what it should
        protect was never put, and the next attempt would never come."""
        regrant = self.lease is not None
        sent = time.monotonic()
        lease = await self._client.lease(self._ttl)
        if self._on_new_lease is not None:
            try:
                await self._on_new_lease(lease)
            except BaseException:
                with contextlib.suppress(Exception):
                    await lease.revoke()
                raise
        self.lease = lease
        if regrant:
            LEASE_REGRANTS.inc()
        self._valid_until = sent + self._ttl

    async def _keep_alive(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(RETRY_KEEP_ALIVE_S if failing else self._ttl / 3)
            try:
                sent = time.monotonic()
                response = await self.lease.refresh()
                if response.TTL <= 0:
                    log.warning("lease lost, granting a new one")
                    await self._grant()
                else:
                    self._valid_until = sent + int(response.TTL)
                if failing:
                    log.info("lease keep-alive works again")
                failing = False
            except Exception as exc:
                if not failing:
                    log.warning("lease keep-alive failed", error=str(exc))
                failing = True
                with contextlib.suppress(Exception):
                    await self._grant()
                    failing = False

    def _keep_alive_on_thread(self, main_loop: asyncio.AbstractEventLoop) -> None:
        """The keep-alive loop on its own thread, with blocking gRPC: gRPC's asyncio
        calls complete through the service's event loop, which is what may be held.
        A lost lease is granted again on `main_loop`.

        Each failed attempt waits longer for its answer (`_answer_wait`): over a slow
        link a new connection and its first answer take longer than a third of the
        TTL, and a keep-alive that reached etcd but was given up renews the lease
        there without making it `valid()` here. For the same reason a lease whose
        validity lapsed is not renewed any more: its owner gave up what it protects,
        so etcd must let it expire (others then take over) rather than keep it alive
        from requests whose answers come too late; a new lease is granted instead."""
        assert self._endpoints is not None
        endpoints = itertools.cycle(self._endpoints)
        channel: grpc.Channel | None = None
        failing, failures = False, 0
        try:
            while not self._thread_stop.wait(RETRY_KEEP_ALIVE_S if failing else self._ttl / 3):
                try:
                    if not self.valid():
                        log.warning("lease validity lapsed: letting it expire, granting a new one")
                        asyncio.run_coroutine_threadsafe(self._grant(), main_loop).result()
                    if channel is None:
                        host, port = next(endpoints)
                        channel = grpc.insecure_channel(f"{host}:{port}", RECONNECT_OPTIONS)
                    stub = rpc_pb2_grpc.LeaseStub(channel)
                    sent = time.monotonic()
                    request = rpc_pb2.LeaseKeepAliveRequest(ID=self.lease.id)
                    answers = stub.LeaseKeepAlive(
                        iter([request]), timeout=self._answer_wait(failures)
                    )
                    ttl = next(answers).TTL
                    if ttl <= 0:
                        log.warning("lease lost, granting a new one")
                        asyncio.run_coroutine_threadsafe(self._grant(), main_loop).result()
                    else:
                        self._valid_until = sent + ttl
                    if failing:
                        log.info("lease keep-alive works again")
                    failing, failures = False, 0
                except Exception as exc:
                    if not failing:
                        log.warning("lease keep-alive failed", error=str(exc))
                    failing, failures = True, failures + 1
                    if channel is not None:
                        channel.close()
                        channel = None  # the next attempt dials the next endpoint
        finally:
            if channel is not None:
                channel.close()

    def _answer_wait(self, failures: int) -> float:
        """How long a keep-alive waits for its answer after `failures` failed ones in a
        row: a third of the TTL (at least 1 s), doubling up to the TTL (an answer later
        than that could not make the lease valid)."""
        return float(min(self._ttl, max(1.0, self._ttl / 3) * 2**failures))


class Registration(KeptLease):
    """Keeps one member registered under its own lease until closed."""

    def __init__(
        self,
        client: aetcd.Client,
        member: Member,
        ttl_s: int,
        endpoints: list[tuple[str, int]] | None = None,
    ) -> None:
        super().__init__(client, ttl_s, self._put, endpoints)
        self._member = member

    async def _first_grant(self) -> None:
        # A service starting while etcd is down or paused registers as soon as it answers.
        await until_reachable("etcd to register", self._grant)

    async def _put(self, lease: Any) -> None:
        await self._client.put(self._member.key.encode(), self._member.to_json(), lease=lease)


async def list_members(client: aetcd.Client, service: str | None = None) -> list[Member]:
    """Every registered member, or those of one service, sorted by service and id."""
    prefix = MEMBERS_PREFIX + (f"{service}/" if service else "")
    result = await client.get_prefix(prefix.encode())
    members = [Member.from_json(kv.value) for kv in result]
    return sorted(members, key=lambda m: (m.service, m.instance_id))


#: After a failed refresh or a change, the directory refreshes this often for
#: `EAGER_FOR_S`: when etcd comes back from an outage that outlasted the leases,
#: every member's key vanishes and is put again moments later, and a view taken
#: in between must not stay empty for a whole interval.
EAGER_INTERVAL_S = 0.1
EAGER_FOR_S = 3.0


class MemberDirectory(RefreshedView):
    """A local, periodically refreshed view of the members of some services.

    Owned by the process that needs it; `refresh()` can also be called when a
    lookup misses (a member just joined) or a peer fails (it just left). It
    refreshes every `interval_s`, and every `EAGER_INTERVAL_S` for a while after
    it starts, a failure or a change, and for as long as a service it saw has no member at
    all (a killed storage node's key expired: its restart must be seen at once), or a
    service in `wanted` has none yet (a router without a storage node cannot open a
    partition: one registering after the first eager seconds must be seen at once too).
    """

    what = "member directory"

    def __init__(
        self, client: aetcd.Client, interval_s: float = 1.0, wanted: tuple[str, ...] = ()
    ) -> None:
        super().__init__(interval_s)
        self._client = client
        # Eager from the start: the peers of a process often start beside it (`tamto up`
        # and test clusters start storage and routers together), and a first view taken
        # before they registered must not stay empty for a whole interval.
        self._eager_until = time.monotonic() + EAGER_FOR_S
        self._members: dict[str, list[Member]] = {}
        # Services with no member now that were seen before, or are wanted.
        self._gone: set[str] = set(wanted)

    def members(self, service: str) -> list[Member]:
        return self._members.get(service, [])

    async def first(self, service: str) -> Member:
        """The first member of `service`, refreshing once on a miss (one just joined);
        Unavailable when none is registered."""
        if not self.members(service):
            await self.refresh()
        found = self.members(service)
        if not found:
            raise Unavailable(f"no {service} service is registered")
        return found[0]

    async def refresh(self) -> None:
        grouped: dict[str, list[Member]] = {}
        for member in await list_members(self._client):
            grouped.setdefault(member.service, []).append(member)
        if grouped != self._members:
            self._gone = (self._gone | self._members.keys()) - grouped.keys()
            self._members = grouped
            self._eager_until = time.monotonic() + EAGER_FOR_S
            self.announce_change()

    def next_wait_s(self) -> float:
        eager = bool(self._gone) or time.monotonic() < self._eager_until
        return EAGER_INTERVAL_S if eager else self._interval

    def refresh_failed(self, exc: Exception, waited_s: float) -> None:
        if waited_s >= self._interval:  # quiet while refreshing eagerly
            super().refresh_failed(exc, waited_s)
        self._eager_until = time.monotonic() + EAGER_FOR_S
