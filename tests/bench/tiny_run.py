"""The smallest benchmark run the bench tests make, and how they run the command."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    # each phase waits until the last one's data is sealed (storage's 5 s default age)
    "--seal-age-ms",
    "300",
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


@dataclass(frozen=True)
class LocalBench:
    """What a `tamto bench --local` run printed and the two reports it wrote."""

    stdout: str
    doc: dict[str, Any]
    markdown: str


def run_local_bench(
    tmp_path: Path,
    systems: str,
    *,
    timeout_s: float,
    options: Sequence[str] = (),
    overrides: Sequence[str] = (),
) -> LocalBench:
    """`tamto bench --local <options> --systems <systems>` (see `run_bench`), writing its
    JSON and Markdown reports under `tmp_path`, and what it printed and wrote."""
    out = tmp_path / "bench.json"
    md = tmp_path / "bench.md"
    proc = run_bench(
        "--local",
        *options,
        "--systems",
        systems,
        "--json",
        str(out),
        "--markdown",
        str(md),
        cwd=tmp_path,
        timeout_s=timeout_s,
        overrides=overrides,
    )
    return LocalBench(proc.stdout, json.loads(out.read_text()), md.read_text())
