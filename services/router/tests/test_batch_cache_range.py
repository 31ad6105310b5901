"""The batch cache forgets what retention removed: batches below a partition's new start."""

from __future__ import annotations

from tamto_router.batch_cache import BatchCache
from tamto_router.model import Batch


def batch(base: int, n: int, size: int = 10) -> Batch:
    return Batch(base, n, 0, bytes(size))


def test_drop_below_forgets_the_batches_under_the_start_and_keeps_the_rest() -> None:
    cache = BatchCache(1000)
    key = ("s", 0)
    cache.add(key, [batch(0, 3), batch(3, 3)])
    cache.add(key, [batch(6, 3)], read=True)
    cache.add(("s", 1), [batch(0, 3)])
    cache.drop_below(key, 6)
    assert cache.get(key, 0, 0, 1 << 20) is None
    assert cache.get(key, 4, 0, 1 << 20) is None
    assert [b.base_offset for b in cache.get(key, 6, 0, 1 << 20) or []] == [6]
    assert cache.get(("s", 1), 0, 0, 1 << 20) is not None, "other partitions stay"
    assert cache.bytes == 20
    assert len(cache) == 2
    cache.drop_below(key, 100)
    assert cache.get(key, 6, 0, 1 << 20) is None
    assert cache.bytes == 10
    assert len(cache) == 1
