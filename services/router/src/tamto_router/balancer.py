"""Load balancing: routers report load, one balancer moves partitions.

Pulsar's load manager is the model: every broker reports its load, one elected
leader compares them and sheds a bundle of the busiest broker to the idlest one.
Here:

- **Reports.** Every router publishes, every `--load-report-interval-s`, a
  `LoadReport` on `tamto.events.load`: the messages and bytes per second
  appended to each partition it has open since its last report, and its
  process CPU (the share of one core the process used). `LoadMeter` computes
  them from the partition logs' running totals (`PartitionLog.appended_*`);
  nothing is counted per message.
- **One balancer.** The router that holds `/tamto/balancer/leader` (put with
  its etcd lease, if absent: one transaction; it vanishes with the lease)
  decides; every router keeps the latest report of each router (reports
  older than three intervals are ignored: that router is gone or silent).
- **The decision** (`decide`, a pure function, tested with a fake clock): a
  partition's load is its messages per second plus its bytes per second / KiB
  (a message costs the router about as much as a KiB of payload), a router's the
  sum over its partitions. When the busiest router's load is at least
  `--balance-min-load` and more than `--balance-threshold` times the idlest's,
  the hottest partition of the busiest router whose load is below the gap
  between the two moves to the idlest (moving one at least as large as the gap
  would only swap their roles). After a move, and after becoming the balancer,
  nothing moves for `--balance-cooldown-s`, so the next reports show the
  effect before the next decision and the cluster does not flap. CPU is
  reported (it is what an operator compares) but does not decide: it cannot be
  attributed to partitions.
- **The move** is `tamto_common.placement.move_partition` (the one "move
  partition P to router R", the same as `tamto partition move`): recorded in
  etcd, the old owner hands the partition back and the new one claims it,
  keeping each key's order for subscriptions (docs/cluster.md section 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import aetcd
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from tamto_common.bus import EVENTS, publish_event
from tamto_common.errors import TamtoError
from tamto_common.placement import move_partition

log = structlog.get_logger(__name__)

LOAD = "load"
LEADER_KEY = "/tamto/balancer/leader"
#: Bytes of payload that weigh as much as one message in a partition's load.
BYTES_PER_MESSAGE = 1024
#: Reports older than this many report intervals are ignored.
STALE_INTERVALS = 3


@dataclass(frozen=True, slots=True)
class PartitionLoad:
    stream: str
    partition: int
    messages_per_s: float
    bytes_per_s: float

    @property
    def load(self) -> float:
        return self.messages_per_s + self.bytes_per_s / BYTES_PER_MESSAGE


@dataclass(frozen=True, slots=True)
class LoadReport:
    """One router's load over its last report interval."""

    router: str
    cpu: float
    partitions: tuple[PartitionLoad, ...]

    @property
    def load(self) -> float:
        return sum(p.load for p in self.partitions)

    def to_event(self) -> dict[str, object]:
        return {
            "router": self.router,
            "cpu": round(self.cpu, 4),
            "partitions": [
                [p.stream, p.partition, round(p.messages_per_s, 3), round(p.bytes_per_s, 1)]
                for p in self.partitions
            ],
        }

    @classmethod
    def from_event(cls, data: bytes) -> LoadReport:
        """Parse a `tamto.events.load` message; ValueError when it is not one."""
        try:
            event = json.loads(data)
            return cls(
                str(event["router"]),
                float(event["cpu"]),
                tuple(
                    PartitionLoad(str(s), int(p), float(m), float(b))
                    for s, p, m, b in event["partitions"]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a load report: {exc}") from None


@dataclass(frozen=True, slots=True)
class BalanceSettings:
    #: Move when the busiest router's load exceeds this many times the idlest's.
    threshold: float = 2.0
    #: ... and is at least this (messages per second, bytes counted per KiB).
    min_load: float = 1000.0
    #: No move for this long after a move or after becoming the balancer.
    cooldown_s: float = 60.0
    #: How often routers report; reports older than `STALE_INTERVALS` of it are ignored.
    report_interval_s: float = 5.0


@dataclass(frozen=True, slots=True)
class Move:
    stream: str
    partition: int
    source: str
    target: str
    #: The loads it was decided on, for the log.
    source_load: float
    target_load: float
    partition_load: float


def decide(
    reports: Mapping[str, tuple[float, LoadReport]],
    routers: Iterable[str],
    now: float,
    quiet_until: float,
    settings: BalanceSettings,
) -> Move | None:
    """The move to make now, or None. `reports`: router -> (monotonic time received,
    report); `routers`: the routers that may own partitions (live, not drained)."""
    if now < quiet_until:
        return None
    fresh_s = settings.report_interval_s * STALE_INTERVALS
    eligible = set(routers)
    current = [
        report
        for router, (at, report) in reports.items()
        if router in eligible and now - at <= fresh_s
    ]
    # A live router that has not reported yet counts as idle: it may have just joined.
    idle = [LoadReport(r, 0.0, ()) for r in eligible - {r.router for r in current}]
    if len(current) + len(idle) < 2 or not current:
        return None
    busiest = max(current, key=lambda r: (r.load, r.router))
    idlest = min([*current, *idle], key=lambda r: (r.load, r.router))
    if busiest.load < settings.min_load or busiest.load <= settings.threshold * idlest.load:
        return None
    gap = busiest.load - idlest.load
    movable = [p for p in busiest.partitions if 0 < p.load < gap]
    if not movable:
        return None
    hottest = max(movable, key=lambda p: (p.load, p.stream, p.partition))
    return Move(
        hottest.stream,
        hottest.partition,
        busiest.router,
        idlest.router,
        busiest.load,
        idlest.load,
        hottest.load,
    )


class LoadMeter:
    """Turns running totals (messages, bytes appended per partition; process CPU
    seconds) into the rates of one report interval."""

    def __init__(
        self,
        router: str,
        totals: Callable[[], Mapping[tuple[str, int], tuple[int, int]]],
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self._router = router
        self._totals = totals
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._last_at = clock()
        self._last_cpu = cpu_clock()
        self._last: Mapping[tuple[str, int], tuple[int, int]] = totals()

    def sample(self) -> LoadReport:
        now, cpu, totals = self._clock(), self._cpu_clock(), self._totals()
        elapsed = max(now - self._last_at, 1e-6)
        partitions = []
        for (stream, partition), (messages, size) in sorted(totals.items()):
            before_messages, before_size = self._last.get((stream, partition), (0, 0))
            # A log opened again starts from zero: count what it has since.
            if messages < before_messages or size < before_size:
                before_messages, before_size = 0, 0
            partitions.append(
                PartitionLoad(
                    stream,
                    partition,
                    (messages - before_messages) / elapsed,
                    (size - before_size) / elapsed,
                )
            )
        report = LoadReport(self._router, (cpu - self._last_cpu) / elapsed, tuple(partitions))
        self._last_at, self._last_cpu, self._last = now, cpu, totals
        return report


class Balancer:
    """A router's part in load balancing: report its load, and decide while elected."""

    def __init__(
        self,
        etcd: aetcd.Client,
        bus: NatsClient,
        router: str,
        meter: LoadMeter,
        lease: Callable[[], aetcd.Lease | None],
        eligible_routers: Callable[[], Iterable[str]],
        settings: BalanceSettings,
    ) -> None:
        self._etcd = etcd
        self._bus = bus
        self._router = router
        self._meter = meter
        self._lease = lease
        self._eligible = eligible_routers
        self.settings = settings
        self.reports: dict[str, tuple[float, LoadReport]] = {}
        self._leading = False
        self._quiet_until = 0.0
        self._task: asyncio.Task[None] | None = None
        self._subscription: object | None = None

    async def start(self) -> None:
        subscription = await self._bus.subscribe(f"{EVENTS}.{LOAD}", cb=self._on_report)
        self._subscription = subscription
        self._task = asyncio.create_task(self._loop(), name="balancer")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()  # type: ignore[attr-defined]

    async def _on_report(self, msg: Msg) -> None:
        try:
            report = LoadReport.from_event(msg.data)
        except ValueError as exc:
            log.warning("bad load report", error=str(exc))
            return
        self.reports[report.router] = (time.monotonic(), report)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.report_interval_s)
            try:
                report = self._meter.sample()
                await publish_event(self._bus, LOAD, **report.to_event())
                if await self._lead():
                    await self._balance()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # etcd or the bus away for a moment: next round
                log.warning("load balancing round failed", error=str(exc))

    async def _lead(self) -> bool:
        """Whether this router is the balancer (taking the role if nobody has it)."""
        lease = self._lease()
        if lease is None:
            self._leading = False
            return False
        key = LEADER_KEY.encode()
        tx = self._etcd.transactions
        await self._etcd.transaction(
            compare=[tx.version(key) == 0],
            success=[tx.put(key, self._router.encode(), lease=lease)],
            failure=[],
        )
        got = await self._etcd.get(key)
        leading = got is not None and got.value.decode() == self._router
        if leading and not self._leading:
            log.info("this router is the load balancer")
            # Let every router report before the first decision.
            self._quiet_until = time.monotonic() + self.settings.cooldown_s
        self._leading = leading
        return leading

    async def _balance(self) -> None:
        move = decide(
            self.reports,
            self._eligible(),
            time.monotonic(),
            self._quiet_until,
            self.settings,
        )
        if move is None:
            return
        self._quiet_until = time.monotonic() + self.settings.cooldown_s
        try:
            await move_partition(self._etcd, move.stream, move.partition, move.target)
        except TamtoError as exc:
            log.warning("load balancing move refused", error=str(exc))
            return
        log.info(
            "load balancing moved a partition",
            stream=move.stream,
            partition=move.partition,
            source=move.source,
            target=move.target,
            source_load=round(move.source_load, 1),
            target_load=round(move.target_load, 1),
            partition_load=round(move.partition_load, 1),
        )
