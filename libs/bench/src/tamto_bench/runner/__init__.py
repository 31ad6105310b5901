"""The benchmark runner: which phases a run has, the systems it starts, each workload
family, and the JSON document of the results (`run_bench`).

`options` holds what shapes a run, `systems` starts the systems under test, `admin`
creates and deletes each workload's streams, `context` is what every workload
shares, `durable`, `ephemeral`, `gateway_protocols` and `baselines` are the workload
families, `plan` orders them into phases, `stats` does the arithmetic and `run`
drives a whole run.

Besides the one-node systems (`SYSTEMS`) a run may measure the cluster
(`CLUSTER_SYSTEMS`): "tamto-r3", a local Tamto of `--nodes` storage nodes and
routers with two gateways and streams of replication factor 3 and ack quorum 2,
and "jetstream-r3", three clustered nats-servers with streams of 3 replicas.
Their workers are the same as the one-node systems' ("tamto" and "jetstream"
jobs); their results are recorded under "tamto_r3" and "jetstream_r3".
"""

from tamto_bench.runner.options import (
    CLUSTER_REPLICAS,
    CLUSTER_SYSTEMS,
    OPTIONAL_SYSTEMS,
    SYSTEMS,
    BenchOptions,
    Progress,
)
from tamto_bench.runner.run import run_bench
from tamto_bench.runner.stats import publish_side

__all__ = [
    "CLUSTER_REPLICAS",
    "CLUSTER_SYSTEMS",
    "OPTIONAL_SYSTEMS",
    "SYSTEMS",
    "BenchOptions",
    "Progress",
    "publish_side",
    "run_bench",
]
