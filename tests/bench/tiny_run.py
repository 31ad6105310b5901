"""The smallest benchmark run the bench tests make, and how they run the command."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..programs import run_to_end

TINY_RUN = (
    "--quick",
    "--sizes",
    "100",
    "--duration",
    "0.5",
    "--rates",
    "500",
    "--producers",
    "1",
    "--consumers",
    "1",
    "--partitions",
    "2",
)


def run_bench(
    *args: str,
    cwd: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    overrides: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`tamto bench <args> <TINY_RUN> <overrides>` in a process of its own (an option in
    `overrides` wins over TINY_RUN's); fails the test on a non-zero exit, showing what
    it printed."""
    proc = run_to_end(
        [sys.executable, "-m", "tamto_cli", "bench", *args, *TINY_RUN, *overrides],
        base_env=env,
        timeout=timeout_s,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc
