"""`tamto bench`: Tamto's throughput, latency and memory beside NATS JetStream's.

Every workload runs in worker processes (one event loop each, see `pool`), on
loopback only, for a bounded number of seconds. `runner` drives the phases,
`report` turns the measurements into the summary table, the JSON document and
the target verdicts. `docs/benchmarks.md` explains each number.
"""

from tamto_bench.command import bench

__all__ = ["bench"]
