"""What every workload of a run shares (`Bench`): the options, the worker pool, the
systems and their admin clients, how a worker's job is specified, and where results go."""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tamto_bench.pool import WorkerPool
from tamto_bench.runner.admin import Admin
from tamto_bench.runner.options import CLUSTER_SYSTEMS, BenchOptions
from tamto_bench.runner.systems import Systems
from tamto_bench.spec import JobResult, JobSpec

#: The worker jobs (spec.system) each benchmarked system runs.
_WORKER_SYSTEM = {"tamto-r3": "tamto", "jetstream-r3": "jetstream"}
#: Extra time a phase may take beyond its window before it counts as hung.
_PHASE_SLACK_S = 90.0


def result_key(system: str) -> str:
    """Where a system's results go in the JSON ("core" → "core_nats", "tamto-r3" →
    "tamto_r3")."""
    return "core_nats" if system == "core" else system.replace("-", "_")


@dataclass
class Bench:
    """One run's shared state, handed to every workload."""

    options: BenchOptions
    pool: WorkerPool
    workdir: Path
    systems: Systems
    admin: Admin = field(init=False)
    #: The results by size (str) and system (`result_key`).
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Each cluster system's client targets, taken in turn by its workers (clients
    #: spread over the gateways, and over the nats-servers).
    _turns: dict[str, Iterator[str]] = field(default_factory=dict)
    _run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    def __post_init__(self) -> None:
        self.admin = Admin(self.options.partitions)
        for size in self.options.sizes:
            self.results[str(size)] = {}

    @property
    def run_id(self) -> str:
        """What every stream of this run is named after."""
        return self._run_id

    def record(self, size: int, system: str, values: dict[str, Any]) -> None:
        """Add `values` to `system`'s results at `size`."""
        self.results[str(size)].setdefault(result_key(system), {}).update(values)

    def target(self, system: str) -> str:
        """Where a worker of `system` connects; a cluster's workers take its gateways
        (or servers) in turn."""
        systems = self.systems
        if system in CLUSTER_SYSTEMS:
            if system not in self._turns:
                if system == "tamto-r3":
                    assert systems.tamto_r3 is not None
                    urls: Sequence[str] = systems.tamto_r3.gateway_urls
                else:
                    assert systems.nats_r3_url is not None
                    urls = systems.nats_r3_url.split(",")
                self._turns[system] = itertools.cycle(urls)
            return next(self._turns[system])
        if system in ("tamto", "ephemeral") and systems.tamto is not None:
            return systems.tamto.url
        return systems.nats_url or ""

    def spec(self, system: str, role: str, stream: str, size: int, **kw: Any) -> JobSpec:
        """One worker's job: `role` of `system` on `stream`, the run's options unless
        `kw` says otherwise."""
        o = self.options
        target = kw.pop("target", None)
        if target is None:
            target = self.target(system)
        tamto = self.systems.tamto_r3 if system == "tamto-r3" else self.systems.tamto
        return JobSpec(
            system=_WORKER_SYSTEM.get(system, system),
            role=role,
            target=target,
            stream=stream,
            size=size,
            duration_s=kw.pop("duration_s", o.duration_s),
            api_key=tamto.api_key if tamto else "",
            linger_ms=o.linger_ms,
            window=kw.pop("window", o.window),
            credits=o.credits,
            idle_s=o.idle_s,
            **kw,
        )

    async def run(self, what: str, specs: list[JobSpec], window_s: float) -> list[JobResult]:
        """Run `specs` on the pool, each worker's result in order; hung: `BenchError`."""
        return await self.pool.run(specs, what, timeout_s=window_s + _PHASE_SLACK_S)

    def stream(self, kind: str, size: int, rate: float = 0) -> str:
        """The name of this run's `kind` stream at `size` (and `rate`)."""
        suffix = f"-{int(rate)}" if rate else ""
        return f"bench-{self._run_id}-{kind}-{size}{suffix}"

    @contextlib.asynccontextmanager
    async def stream_on(self, system: str, stream: str, push: bool = False) -> AsyncIterator[None]:
        """`stream` on `system` for the block: created before, deleted after."""
        await self.admin.create(system, stream, push)
        try:
            yield
        finally:
            await self.admin.delete(system, stream)
