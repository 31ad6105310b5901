"""The workloads measured on their own rather than beside a peer: the bare gRPC
ceiling (client → hop → hop → sink, what the machine allows a broker path at all) and
the processing service's functions, stream to stream."""

from __future__ import annotations

from tamto_bench.harness import HOST
from tamto_bench.runner.context import Bench
from tamto_bench.runner.options import MB
from tamto_local.ports import free_port


async def ceiling(bench: Bench, size: int) -> None:
    """The bare ceiling: a client, two forwarding hops and a sink writing a file."""
    o = bench.options
    ports = [free_port(HOST) for _ in range(3)]
    path = bench.workdir / f"ceiling-{size}.log"
    specs = [
        bench.spec("ceiling", "sink", "", size, port=ports[2], path=str(path)),
        bench.spec("ceiling", "hop", "", size, port=ports[1], target=f"{HOST}:{ports[2]}"),
        bench.spec("ceiling", "hop", "", size, port=ports[0], target=f"{HOST}:{ports[1]}"),
        bench.spec(
            "ceiling",
            "client",
            "",
            size,
            target=f"{HOST}:{ports[0]}",
            window=o.ceiling_inflight,
        ),
    ]
    try:
        results = await bench.run("bare ceiling", specs, o.duration_s + 5)
    finally:
        path.unlink(missing_ok=True)
    rate = results[-1].in_window / o.duration_s
    bench.record(size, "ceiling", {"msgs_s": rate, "mb_s": rate * size / MB})


async def functions(bench: Bench, size: int) -> None:
    """The processing function rows (`tamto_bench.functions_jobs`)."""
    admin = bench.admin.tamto
    assert admin is not None
    from tamto_bench.functions_jobs import function_rows

    prefix = f"bench-{bench.run_id}-fn"
    values = await function_rows(admin, prefix, size, bench.options.partitions, bench.options.quick)
    bench.record(size, "functions", values)
