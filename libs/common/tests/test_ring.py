"""The hash ring: incremental add/remove agree with building it from scratch, and stay cheap."""

from __future__ import annotations

import random
import time

import pytest

from tamto_common.ring import HashRing

KEYS = [f"key-{i}" for i in range(2_000)]


def owners(ring: HashRing) -> list[str]:
    return [ring.owner(k) for k in KEYS]


def test_adding_and_removing_nodes_matches_a_ring_built_from_the_survivors() -> None:
    rng = random.Random(7)
    ring = HashRing([])
    members: set[str] = set()
    for step in range(400):
        if members and rng.random() < 0.4:
            gone = rng.choice(sorted(members))
            members.remove(gone)
            ring.remove(gone)
        else:
            node = f"n{step}"
            members.add(node)
            ring.add(node)
        if step % 50 == 0 and members:
            assert owners(ring) == owners(HashRing(sorted(members)))
    assert owners(ring) == owners(HashRing(sorted(members)))


def test_a_node_leaving_moves_only_its_own_keys() -> None:
    ring = HashRing(["a", "b", "c", "d"])
    before = owners(ring)
    ring.remove("c")
    after = owners(ring)
    moved = [k for k, old, new in zip(KEYS, before, after, strict=True) if old != new]
    assert moved
    assert all(before[KEYS.index(k)] == "c" for k in moved)


def test_an_empty_ring_has_no_owner() -> None:
    ring = HashRing(["a"])
    ring.remove("a")
    assert not ring
    with pytest.raises(LookupError):
        ring.owner("k")


def test_add_and_remove_cost_does_not_grow_with_the_ring() -> None:
    """10,000 nodes (640,000 points): the last add/remove cost about what the first did.

    Rebuilding (the old way) made each change cost O(n log n); one sorted array
    O(n) per point. Bounded at 20x the cost at 500 nodes. Each cost is this process's
    CPU time (not wall time), the least of three rounds, so a loaded machine's
    preemptions do not count.
    """

    def cost_of_changes(ring: HashRing, start: int, count: int) -> float:
        rounds = []
        for _ in range(3):
            began = time.process_time()
            for i in range(start, start + count):
                ring.add(f"x{i}")
            for i in range(start, start + count):
                ring.remove(f"x{i}")
            rounds.append((time.process_time() - began) / count)
        return min(rounds)

    small = HashRing([f"n{i}" for i in range(500)])
    large = HashRing([f"n{i}" for i in range(10_000)])
    assert cost_of_changes(large, 0, 200) < 20 * cost_of_changes(small, 0, 200) + 0.0005
