"""Keep freed memory in the process for the next batch instead of returning it at
once, and keep the cyclic garbage collector off what a process built at startup.

Every hop allocates a few buffers the size of a batch (up to a few MiB) per
call and frees them a moment later. With the allocators' defaults those pages
went back to the kernel as soon as they were free (glibc unmaps allocations
above its adaptive mmap threshold and trims its heaps; Arrow's default pool,
mimalloc, purges freed pages after ~10 ms), so the next batch faulted them in
again, zeroed by the kernel. Measured with two producers publishing 1 KiB
messages with `send_batch` on the 2-core build machine: ~160,000 minor page
faults a second across the services and producers, ~1.6 µs of CPU each (about
an eighth of the machine); with these settings ~45,000, and 15-25% more
messages a second published and consumed at 1 KiB and 10 KiB.

The cost: a process's resident memory stays nearer its peak instead of
shrinking after a burst (glibc keeps up to `TRIM_THRESHOLD` free at the top of
a heap; jemalloc returns Arrow's freed pages over `ARROW_DECAY_MS`). In the
benchmark's quick run, peak RSS rose by ~300 MiB for storage and ~50 MiB for
router and gateway.

`freeze_startup_objects` is about pauses, not faults: a full (generation 2)
collection walks every tracked object, and most of a process's objects are the
modules, classes and functions it imported (pyarrow, grpc, protobuf, ...). In
the benchmark's worker processes such collections took 50-180 ms, several a
second while a producer held thousands of pending sends, and 20-30 ms in the
services: every message in flight at that moment waited, which is a p99.
Objects alive when a process finishes starting are moved to the permanent
generation (`gc.freeze`), so later collections walk only what was made since.
"""

from __future__ import annotations

import ctypes
import gc
import platform
import sys

from tamto_common.config import MIB

#: Allocations up to this size come from glibc's heaps instead of a mapping of
#: their own (setting it also stops glibc from adapting it).
MMAP_THRESHOLD = 8 * MIB
#: Free memory glibc keeps at the top of a heap before returning it to the kernel.
TRIM_THRESHOLD = 64 * MIB
#: How long Arrow's allocator keeps freed pages before returning them.
ARROW_DECAY_MS = 5_000

# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> list[str]:
    """Tune this process's allocators as the module docstring says; call it once at
    the process edge, after the process's modules are imported and before it
    serves. Returns what was tuned: glibc's malloc (not on other C libraries), and
    Arrow's default pool if this process loaded pyarrow and it has jemalloc."""
    tuned = []
    if _tune_glibc_malloc():
        tuned.append("glibc malloc")
    if _arrow_on_jemalloc():
        tuned.append("arrow jemalloc")
    return tuned


def _tune_glibc_malloc() -> bool:
    if platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def _arrow_on_jemalloc() -> bool:
    """Make jemalloc, with a slow decay, Arrow's default pool (mimalloc's purge delay
    is only read from the environment when the library loads). A process that
    never loaded pyarrow is left without it (importing it costs ~40 MiB)."""
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return False
    try:
        pool = pa.jemalloc_memory_pool()
        pa.jemalloc_set_decay_ms(ARROW_DECAY_MS)
    except NotImplementedError:  # a pyarrow built without jemalloc
        return False
    pa.set_memory_pool(pool)
    return True


def freeze_startup_objects() -> None:
    """Collect once, then exempt every object alive now from later collections
    (see the module docstring); call it when the process has finished starting."""
    gc.collect()
    gc.freeze()
