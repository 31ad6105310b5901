"""Running a program to its end with its output captured, as the CLI, launcher,
example and bench tests do: one place for the subprocess options they share."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_to_end(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` until it exits (or `timeout` passes), its output captured as text,
    with `env` over `base_env` (this process's environment unless given)."""
    return subprocess.run(
        list(argv),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env={**(os.environ if base_env is None else base_env), **(env or {})},
    )
