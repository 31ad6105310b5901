"""The systems under test of one run: which to start (a local Tamto, its cluster,
nats-servers, mosquitto) or where the running one is, their processes' memory watched,
and where their metrics pages are. Each system stops with the run's exit stack."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from tamto_bench import mqtt_bench
from tamto_bench.harness import (
    RssSampler,
    TamtoTarget,
    jetstream_cluster,
    jetstream_server,
    local_tamto,
    metrics_urls,
    service_pids,
)
from tamto_bench.pool import BenchError
from tamto_bench.runner.options import BenchOptions
from tamto_bench.runner.stats import LATENCY_HOPS

#: The systems that need the one-node Tamto.
_ON_TAMTO = {"tamto", "ephemeral", "functions", "http", "mqtt"}


@dataclass
class Systems:
    """Where each system under test is, and what the run knows of its processes."""

    tamto: TamtoTarget | None = None
    nats_url: str | None = None
    #: The cluster: a Tamto of several nodes, three clustered nats-servers.
    tamto_r3: TamtoTarget | None = None
    nats_r3_url: str | None = None
    #: Debian's mosquitto beside the gateway's MQTT broker ("mqtt").
    mosquitto: mqtt_bench.Broker | None = None
    #: Each Tamto's services' pids by name ("gateway", ...), by system.
    pids: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Every Tamto's storage nodes' metrics pages (what is not sealed yet).
    storage_urls: list[str] = field(default_factory=list)
    #: Each Tamto's routers' metrics pages, by system ("tamto", "tamto-r3").
    router_metrics: dict[str, list[str]] = field(default_factory=dict)
    #: Each Tamto's metrics pages by service ("gateway", "router", "storage"), by system.
    service_metrics: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    #: What the report should say about how the systems were measured.
    notes: list[str] = field(default_factory=list)


@dataclass
class _Starter:
    """Starts (or finds) each system a run measures, on the run's exit stack."""

    stack: contextlib.AsyncExitStack
    options: BenchOptions
    workdir: Path
    sampler: RssSampler
    local: bool
    target: TamtoTarget | None
    found: Systems = field(default_factory=Systems)

    async def tamto(self, system: str, nodes: int) -> TamtoTarget:
        """A local Tamto of `nodes` nodes, or the running one; its memory watched."""
        if self.local:
            mqtt = "mqtt" in self.options.systems and system == "tamto"
            colocate = self.options.colocate
            found = await self.stack.enter_async_context(
                local_tamto(
                    self.workdir / system,
                    nodes=nodes,
                    mqtt=mqtt,
                    colocate=colocate,
                    env=self.options.storage_env(),
                )
            )
            if colocate:
                self.found.notes.append(f"{system}: routers and storage nodes co-located")
            if self.options.seal_age_ms:
                self.found.notes.append(
                    f"{system}: storage's seal age {self.options.seal_age_ms} ms (--seal-age-ms)"
                )
        elif self.target is None:
            raise BenchError("no Tamto to benchmark: pass --local or a gateway URL")
        else:
            found = self.target
        try:
            await self._watch(system, found)
        except Exception as exc:  # memory is reported only when etcd says where
            self.found.notes.append(f"{system}: service memory not sampled: {exc}")
        return found

    async def _watch(self, system: str, found: TamtoTarget) -> None:
        systems = self.found
        systems.pids[system] = await service_pids(found.etcd)
        self.sampler.watch(system, systems.pids[system])
        systems.storage_urls.extend(await metrics_urls(found.etcd, "storage"))
        systems.router_metrics[system] = await metrics_urls(found.etcd, "router")
        systems.service_metrics[system] = {
            service: await metrics_urls(found.etcd, service)
            for service in {service for service, _, _ in LATENCY_HOPS}
        }

    async def mosquitto(self) -> mqtt_bench.Broker:
        mqtt_bench.raise_fd_limit()
        broker = await self.stack.enter_async_context(
            mqtt_bench.mosquitto_server(self.workdir / "mosquitto")
        )
        self.sampler.watch("mosquitto", {"mosquitto": broker.pid})
        return broker

    async def nats(self) -> str:
        url, pid = await self.stack.enter_async_context(
            jetstream_server(self.workdir / "jetstream", self.options.jetstream_sync)
        )
        self.sampler.watch("jetstream", {"nats-server": pid})
        return url

    async def nats_cluster(self) -> str:
        urls, pids = await self.stack.enter_async_context(
            jetstream_cluster(self.workdir / "jetstream-r3", self.options.jetstream_sync)
        )
        self.sampler.watch("jetstream-r3", pids)
        return urls


async def start_systems(
    stack: contextlib.AsyncExitStack,
    options: BenchOptions,
    workdir: Path,
    sampler: RssSampler,
    *,
    local: bool,
    target: TamtoTarget | None,
) -> Systems:
    """Start every system `options` measures (in the order the run always has)."""
    chosen = set(options.systems)
    start = _Starter(stack, options, workdir, sampler, local, target)
    systems = start.found
    if _ON_TAMTO & chosen:
        systems.tamto = await start.tamto("tamto", 1)
    if "mqtt" in chosen:
        systems.mosquitto = await start.mosquitto()
    if "tamto-r3" in chosen:
        systems.tamto_r3 = await start.tamto("tamto-r3", options.nodes)
    if "jetstream" in chosen or "core" in chosen:
        systems.nats_url = await start.nats()
    if "jetstream-r3" in chosen:
        systems.nats_r3_url = await start.nats_cluster()
    return systems
