"""Consistent hashing (Chord identifier circle with virtual nodes; successor owns).

Every gateway and router computes the same ring from etcd membership, so a
partition's owner is a local lookup, and a member joining or leaving moves only
the partitions on its arcs. Routers also keep one ring per key-shared
subscription over its consumers, which come and go by the thousand: there a
node is added or removed incrementally (`add`, `remove`), each of its points
going into or out of a bucketed sorted array in O(log n) plus a bounded
bucket shift, never rebuilding the ring.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from tamto_protocol.partitioning import key_hash

#: Points per bucket of `_SortedPoints`; a bucket splits at twice this.
_BUCKET = 512


class _SortedPoints:
    """Sorted distinct ints in buckets of at most 2 x `_BUCKET`: insert, remove and
    successor search cost a bisect over the buckets' maxima plus one inside a
    bucket, instead of shifting one array of every point on each insert."""

    def __init__(self, values: list[int]) -> None:
        self._buckets = [values[i : i + _BUCKET] for i in range(0, len(values), _BUCKET)]
        self._maxes = [bucket[-1] for bucket in self._buckets]

    def add(self, value: int) -> None:
        if not self._buckets:
            self._buckets, self._maxes = [[value]], [value]
            return
        i = min(bisect.bisect_left(self._maxes, value), len(self._maxes) - 1)
        bucket = self._buckets[i]
        bisect.insort(bucket, value)
        self._maxes[i] = bucket[-1]
        if len(bucket) > 2 * _BUCKET:
            self._buckets.insert(i + 1, bucket[_BUCKET:])
            del bucket[_BUCKET:]
            self._maxes.insert(i, bucket[-1])

    def remove(self, value: int) -> None:
        i = bisect.bisect_left(self._maxes, value)
        bucket = self._buckets[i]
        del bucket[bisect.bisect_left(bucket, value)]
        if not bucket:
            del self._buckets[i], self._maxes[i]
        else:
            self._maxes[i] = bucket[-1]

    def successor(self, value: int) -> int:
        """The first point at or after `value`, wrapping around to the smallest."""
        i = bisect.bisect_left(self._maxes, value)
        if i == len(self._maxes):
            return self._buckets[0][0]
        bucket = self._buckets[i]
        return bucket[bisect.bisect_left(bucket, value)]


class HashRing:
    """Maps keys to nodes; each node sits at `vnodes` points on a 64-bit circle.

    Two nodes' points colliding on the 64-bit circle is never expected; should it
    happen, the point belongs to the node that sorts first by name, as it did when
    the ring was one sorted array of (point, node).
    """

    def __init__(self, nodes: Iterable[str], vnodes: int = 64) -> None:
        self._vnodes = vnodes
        self._owner: dict[int, str] = {}
        for node in nodes:
            for point in self._points(node):
                held = self._owner.get(point)
                if held is None or node < held:
                    self._owner[point] = node
        self._sorted = _SortedPoints(sorted(self._owner))

    def _points(self, node: str) -> list[int]:
        return [key_hash(f"{node}#{i}".encode()) for i in range(self._vnodes)]

    def __bool__(self) -> bool:
        return bool(self._owner)

    def add(self, node: str) -> None:
        """Put `node`'s points on the ring (it must not be on it yet)."""
        for point in self._points(node):
            held = self._owner.get(point)
            if held is None:
                self._sorted.add(point)
            elif held < node:
                continue
            self._owner[point] = node

    def remove(self, node: str) -> None:
        """Take `node`'s points off the ring; its keys move to their next points."""
        for point in self._points(node):
            if self._owner.get(point) == node:
                del self._owner[point]
                self._sorted.remove(point)

    def owner(self, key: str) -> str:
        """The node that owns `key`: the first point clockwise from its hash."""
        if not self._owner:
            raise LookupError("the ring has no nodes")
        return self._owner[self._sorted.successor(key_hash(key.encode()))]


def partition_key(stream: str, partition: int) -> str:
    return f"{stream}/{partition}"
