"""Keep freed memory in the process for the next batch instead of returning it at once.

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
"""

from __future__ import annotations

import ctypes
import platform
import sys

MIB = 1024 * 1024
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
