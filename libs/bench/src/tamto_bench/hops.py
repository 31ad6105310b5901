"""Where one `send_and_wait` goes, hop by hop (docs/benchmarks.md, "per hop").

`python -m tamto_bench.hops SIZE SECONDS [colocate]` starts a local Tamto (`local_tamto`;
with `colocate` its router and storage node as one process, `tamto up --colocate`,
whose storage hop is then an in-process call no gRPC metric times), calls
`send_and_wait` one after another on a 4-partition stream for SECONDS after 3 s of
warm-up, and prints each hop's mean server time per call (the services' own
`tamto_rpc_server_seconds`), storage's mean fsync, each hop's own share (its server
time minus the next hop's) and every process's CPU per message. A measurement tool,
not a benchmark with a bar: `tamto bench` holds the targets.

With `TAMTO_HOPS_PROFILE=DIR` set, each service is also sampled by py-spy (which
must be on PATH) during the window, its collapsed stacks written to
`DIR/<service>.txt` (`--idle` off: where CPU goes, not where it waits).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tamto_sdk
from tamto_bench.harness import local_tamto, metric_sum, metrics_urls, rpc_totals, service_pids

#: The calls of the publish path, outermost first: through the gateway, the router's
#: `Append`; on the direct path (the SDK's default) the router's `Publish` instead.
HOPS = (
    ("gateway", "/tamto.v1.Gateway/Publish"),
    ("router", "/tamto.v1.Router/Append"),
    ("router_direct", "/tamto.v1.Router/Publish"),
    ("storage", "/tamto.v1.Storage/Append"),
)
FSYNC = "tamto_storage_fsync_seconds"
WARM_UP_S = 3.0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _profilers(pids: dict[str, int], seconds: float) -> list[subprocess.Popen[bytes]]:
    """py-spy recorders of every service for `seconds` (`TAMTO_HOPS_PROFILE`), if asked."""
    directory = os.environ.get("TAMTO_HOPS_PROFILE")
    spy = shutil.which("py-spy")
    if not directory or spy is None:
        return []
    Path(directory).mkdir(parents=True, exist_ok=True)
    options = ["--duration", str(int(seconds)), "--rate", "500", "--format", "raw", "--nonblocking"]
    return [
        subprocess.Popen(
            [spy, "record", "--pid", str(pid), *options, "--output", f"{directory}/{name}.txt"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]


def _service(hop: str) -> str:
    return hop.split("_", 1)[0]


async def _totals(pages: dict[str, list[str]]) -> dict[str, tuple[float, int]]:
    totals = {s: await rpc_totals(pages[s], m) for s, m in HOPS}
    totals["fsync"] = (
        await metric_sum(pages["storage"], f"{FSYNC}_sum"),
        int(await metric_sum(pages["storage"], f"{FSYNC}_count")),
    )
    return totals


async def measure(size: int, seconds: float, colocate: bool = False) -> None:
    """Run the calls and print where their time went."""
    with tempfile.TemporaryDirectory() as tmp:
        async with local_tamto(Path(tmp), colocate=colocate) as target:
            pages = {s: await metrics_urls(target.etcd, _service(s)) for s, _ in HOPS}
            pids = await service_pids(target.etcd)
            async with tamto_sdk.connect(target.url, api_key=target.api_key) as client:
                await client.streams.ensure("hops", partitions=4)
                payload = b"x" * size
                async with client.producer("hops") as producer:
                    end = time.monotonic() + WARM_UP_S
                    while time.monotonic() < end:
                        await producer.send_and_wait(payload)
                    before = await _totals(pages)
                    cpu_before = {n: _cpu_s(p) for n, p in pids.items()}
                    own_before = time.process_time()
                    samples: list[int] = []
                    profilers = _profilers(pids, seconds)
                    end = time.monotonic() + seconds
                    while time.monotonic() < end:
                        started = time.perf_counter_ns()
                        await producer.send_and_wait(payload)
                        samples.append(time.perf_counter_ns() - started)
                    own = time.process_time() - own_before
                    cpu = {n: _cpu_s(p) - cpu_before[n] for n, p in pids.items()}
                    after = await _totals(pages)
                    for profiler in profilers:
                        await asyncio.to_thread(profiler.wait)
    _report(size, seconds, sorted(samples), before, after, own, cpu)


def _report(
    size: int,
    seconds: float,
    samples: list[int],
    before: dict[str, tuple[float, int]],
    after: dict[str, tuple[float, int]],
    own: float,
    cpu: dict[str, float],
) -> None:
    n = len(samples)
    mean_us = sum(samples) / n / 1000
    print(
        f"{size} B: {n} calls in {seconds} s ({n / seconds:.0f}/s); client p50 "
        f"{samples[n // 2] / 1000:.0f} us, p99 {samples[int(n * 0.99)] / 1000:.0f} us, "
        f"mean {mean_us:.0f} us"
    )
    server: dict[str, float] = {}
    for name in (*(s for s, _ in HOPS), "fsync"):
        secs, calls = after[name][0] - before[name][0], after[name][1] - before[name][1]
        server[name] = secs / calls * 1e6 if calls else float("nan")
        print(f"  {name}: {calls} calls, mean {server[name]:.0f} us")
    direct = after["router_direct"][1] > before["router_direct"][1]
    outer = server["router_direct"] if direct else server["gateway"]
    router = server["router_direct"] if direct else server["router"]
    gateway = "" if direct else f"gateway + wire {server['gateway'] - router:.0f}, "
    print(
        f"  own share (mean us{', direct path' if direct else ''}): client + wire "
        f"{mean_us - outer:.0f}, {gateway}router + wire {router - server['storage']:.0f}, "
        f"storage {server['storage'] - server['fsync']:.0f}, fsync {server['fsync']:.0f}"
    )
    shares = ", ".join(f"{k} {v / n * 1e6:.0f}" for k, v in sorted(cpu.items()))
    print(f"  CPU per message (us): client {own / n * 1e6:.0f}, {shares}")


if __name__ == "__main__":
    asyncio.run(measure(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:] == ["colocate"]))
