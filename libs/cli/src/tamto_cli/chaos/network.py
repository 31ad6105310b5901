"""Network faults of `tamto chaos --network`: cuts and delays between a cluster's nodes.

With `--network` the campaign runs in a `tamto_local.netlab.NetworkLab`: node i's
storage node and router (`storage-i`, `router-i`; `storage`, `router` for node 1)
run in network namespace i and bind its address; etcd, NATS, auth, the gateways,
the processing nodes and the campaign's clients stay in the root namespace, on the
lab's bridge address. A network fault hits one node (`node-i`) for a while, then
heals:

- `isolate`: node i loses every link (the root's services, clients, other nodes);
- `split`: node i (a minority of one) loses the other nodes and etcd and NATS (the
  majority's side), while the gateways and clients still reach it: the case where
  a router that cannot renew its lease must stop acknowledging on its own;
- `asymmetric`: what node i sends to the next node (i+1, wrapping) is lost, what
  that node sends to i arrives (a one-way cut);
- `delay`: node i's TCP is delayed by some milliseconds each way (the delay proxy:
  this kernel has no sch_netem).
"""

from __future__ import annotations

import asyncio
import time

from tamto_cli.chaos.checker import Fault
from tamto_local.cluster import LocalCluster
from tamto_local.netlab import NetworkLab

NETWORK_KINDS = ("isolate", "split", "asymmetric", "delay")


def node_names(nodes: int) -> list[str]:
    """The targets of network faults: `node-1` .. `node-N`."""
    return [f"node-{i}" for i in range(1, nodes + 1)]


def storage_addresses(cluster: LocalCluster) -> dict[str, str]:
    """host:port of every storage node of the cluster, where it binds."""
    found = {}
    for name, port in cluster.ports.items():
        if name.split("-")[0] == "storage":
            host = cluster.config.placed.get(name, (cluster.config.host, ()))[0]
            found[name] = f"{host}:{port}"
    return found


async def inject_network(
    lab: NetworkLab, cluster: LocalCluster, target: str, kind: str, lasts_s: float, delay_ms: int
) -> Fault:
    """Apply fault `kind` to node `target` (`node-i`) for `lasts_s`, then heal it; the
    fault lasts from its first rule until its rules are gone."""
    node = int(target.rsplit("-", 1)[1])
    nodes = cluster.config.nodes
    at = time.monotonic()
    try:
        if kind == "isolate":
            await lab.isolate(node)
        elif kind == "split":
            for other in range(1, nodes + 1):
                if other != node:
                    await lab.drop(node, lab.address(other), inbound=True)
            for port in (cluster.config.etcd_port, cluster.config.nats_port):
                await lab.drop(node, lab.root_address, port, inbound=True)
        elif kind == "asymmetric":
            await lab.drop(node, lab.address(node % nodes + 1), inbound=False)
        elif kind == "delay":
            await lab.delay(node, delay_ms)
        else:
            raise ValueError(f"not a network fault: {kind}")
        await asyncio.sleep(lasts_s)
    finally:
        await lab.heal(node)
    return Fault(target, kind, at, time.monotonic())
