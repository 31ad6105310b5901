"""Which processing node runs which function instance: a consistent-hash ring over the nodes.

Every node computes the same answer from the same two lists (the processing members
in etcd and the function specs), so no coordinator is needed: when a node joins or
dies, only the instances on its arcs of the ring move, and a dead node's instances
start on the others as soon as its lease expires from etcd.
"""

from __future__ import annotations

from collections.abc import Iterable

from tamto_functions.model import FunctionSpec

from tamto_common.ring import HashRing


def assigned(
    specs: Iterable[FunctionSpec], nodes: Iterable[str], me: str
) -> dict[str, FunctionSpec]:
    """The instances (id to spec) that node `me` should run among `nodes`."""
    ring = HashRing(sorted(set(nodes)))
    if not ring:
        return {}
    return {
        instance: spec
        for spec in specs
        for instance in spec.instances()
        if ring.owner(instance) == me
    }
