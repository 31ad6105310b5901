"""Consistent hashing (Chord identifier circle with virtual nodes; successor owns).

Every gateway and router computes the same ring from etcd membership, so a
partition's owner is a local lookup, and a member joining or leaving moves only
the partitions on its arcs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from tamto_protocol.partitioning import key_hash


class HashRing:
    """Maps keys to nodes; each node sits at `vnodes` points on a 64-bit circle."""

    def __init__(self, nodes: Iterable[str], vnodes: int = 64) -> None:
        points = sorted(
            (key_hash(f"{node}#{i}".encode()), node) for node in nodes for i in range(vnodes)
        )
        self._hashes = [h for h, _ in points]
        self._nodes = [n for _, n in points]

    def __bool__(self) -> bool:
        return bool(self._nodes)

    def owner(self, key: str) -> str:
        """The node that owns `key`: the first point clockwise from its hash."""
        if not self._nodes:
            raise LookupError("the ring has no nodes")
        index = bisect.bisect_left(self._hashes, key_hash(key.encode()))
        return self._nodes[index % len(self._nodes)]


def partition_key(stream: str, partition: int) -> str:
    return f"{stream}/{partition}"
