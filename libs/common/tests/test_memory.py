"""`keep_freed_memory`: freed batch-sized buffers are reused, not faulted in again.

Each case runs in its own interpreter: the settings are process-wide.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

_CHILD = """
import resource, sys
import pyarrow as pa
if sys.argv[1] == "tuned":
    from tamto_common.memory import keep_freed_memory
    print(",".join(keep_freed_memory()))
else:
    print("")
MIB = 1 << 20

def batches():
    # What a hop does with a burst of batches: allocate them, then free them all.
    parts = [bytes(MIB) for _ in range(20)]
    del parts

batches()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    batches()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
print(pa.default_memory_pool().backend_name)
"""


def _run(mode: str) -> tuple[str, float, str]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return out[0], float(out[1]), out[2]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc only")
def test_freed_buffers_are_reused_instead_of_faulted_in_again() -> None:
    _, default_faults, default_pool = _run("default")
    tuned, tuned_faults, tuned_pool = _run("tuned")
    assert tuned.split(",") == ["glibc malloc", "arrow jemalloc"]
    # 20 MiB freed and allocated again: hundreds of pages refaulted by default
    # (the heap top is trimmed), a third of that with the settings.
    assert default_faults > 200, default_faults
    assert tuned_faults < default_faults / 2, (tuned_faults, default_faults)
    assert default_pool != "jemalloc"
    assert tuned_pool == "jemalloc"


def test_a_process_without_pyarrow_does_not_load_it() -> None:
    code = (
        "import sys; from tamto_common.memory import keep_freed_memory; "
        "tuned = keep_freed_memory(); print('arrow jemalloc' in tuned, 'pyarrow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "False"]


def test_startup_objects_are_out_of_the_collectors_reach() -> None:
    code = (
        "import gc; from tamto_common.memory import freeze_startup_objects; "
        "before = gc.get_freeze_count(); freeze_startup_objects(); "
        "print(before, gc.get_freeze_count())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    before, after = int(out[0]), int(out[1])
    assert before == 0
    assert after > 1_000, "the imported modules' objects are frozen"
