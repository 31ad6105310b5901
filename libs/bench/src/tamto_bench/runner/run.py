"""One benchmark run from start to end: start the systems, run the plan's phases each
on settled services, and write down the JSON document of what was measured."""

from __future__ import annotations

import contextlib
import os
import platform
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tamto_bench.harness import (
    JETSTREAM_CLUSTER_CONFIG,
    JETSTREAM_CONFIG,
    RssSampler,
    TamtoTarget,
    unsealed_bytes,
)
from tamto_bench.pool import WorkerPool
from tamto_bench.runner.context import Bench
from tamto_bench.runner.options import (
    CLUSTER_QUORUM,
    CLUSTER_REPLICAS,
    BenchOptions,
    Phase,
    Progress,
)
from tamto_bench.runner.plan import phases
from tamto_bench.runner.systems import Systems, start_systems
from tamto_common.config import MIB

#: A phase that starts with the services busier than this (cores) gets a note.
_BUSY_CORES = 0.15


async def run_bench(
    options: BenchOptions,
    progress: Progress,
    *,
    local: bool,
    target: TamtoTarget | None,
) -> dict[str, Any]:
    """Run every phase of `options` and return the JSON document of the results.

    With `local`, a whole Tamto starts in a temporary directory (and stops at the
    end); otherwise `target` names the running system. JetStream and core NATS run
    on a nats-server this function starts on a free loopback port.
    """
    o = options
    async with contextlib.AsyncExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tamto-bench-")))
        pool = WorkerPool(max(o.producers + o.consumers, 4))
        stack.callback(pool.close)
        sampler = await stack.enter_async_context(RssSampler())
        systems = await start_systems(stack, o, workdir, sampler, local=local, target=target)
        await pool.started()
        bench = Bench(o, pool, workdir, systems)
        plan = phases(bench)
        await bench.admin.open(systems)
        stack.push_async_callback(bench.admin.close)
        progress.start(len(plan))
        started = time.time()
        settled_s = await _run_phases(plan, progress, sampler, systems)
        progress.phase("done")
        elapsed = time.time() - started
    return {
        "tamto_bench_version": 1,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "elapsed_s": round(elapsed, 1),
        "settle_s": round(settled_s, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "options": {**asdict(o), "local": local},
        "jetstream_config": JETSTREAM_CONFIG.format(
            port="<free port>", store="<temp dir>", sync=o.jetstream_sync
        ),
        "cluster": _cluster(o, systems),
        "sizes": bench.results,
        "memory_peak_rss_bytes": sampler.peaks,
        "notes": systems.notes,
    }


async def _run_phases(
    plan: list[Phase], progress: Progress, sampler: RssSampler, systems: Systems
) -> float:
    """Run each phase once the services have settled (noting when they had not);
    returns the seconds spent waiting for them."""

    async def unsealed() -> int:
        return await unsealed_bytes(systems.storage_urls)

    settled_s = 0.0
    for label, phase in plan:
        progress.phase(label)
        settled = await sampler.settle(unsealed)
        settled_s += settled.waited_s
        if settled.cores >= _BUSY_CORES:
            systems.notes.append(
                f"{label}: started with the services still busy ({settled.cores:.2f} cores)"
            )
        if settled.pending:
            systems.notes.append(
                f"{label}: started with {settled.pending / MIB:.1f} MiB not sealed yet"
            )
        await phase()
    return settled_s


def _cluster(o: BenchOptions, systems: Systems) -> dict[str, Any]:
    """How the cluster systems were set up (None for those the run did not measure)."""
    tamto_r3 = systems.tamto_r3
    return {
        "tamto_r3": {
            "nodes": o.nodes,
            "gateways": len(tamto_r3.gateway_urls),
            "replication_factor": CLUSTER_REPLICAS,
            "ack_quorum": CLUSTER_QUORUM,
        }
        if tamto_r3 is not None
        else None,
        "jetstream_r3_config": JETSTREAM_CLUSTER_CONFIG.format(
            name="js-<i>",
            port="<free port>",
            store="<temp dir>/js-<i>/data",
            sync=o.jetstream_sync,
            cluster_port="<free port>",
            routes="<the three servers' cluster ports>",
        )
        if systems.nats_r3_url is not None
        else None,
    }
