"""Running a program to its end with its output captured, as the CLI, launcher,
example and bench tests do: one place for the subprocess options they share."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tamto_testing.forked import forking, run_forked


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
    with `env` over `base_env` (this process's environment unless given). A `tamto`
    command (`python -m tamto_cli`) is forked by the fork server (`tamto_testing.forked`),
    which imported its libraries already."""
    full_env = {**(os.environ if base_env is None else base_env), **(env or {})}
    if forking() and list(argv[:3]) == [sys.executable, "-m", "tamto_cli"]:
        return run_forked(
            "tamto_cli", argv[3:], env=full_env, stdin=stdin, timeout=timeout, cwd=cwd
        )
    return subprocess.run(
        list(argv),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=full_env,
    )
