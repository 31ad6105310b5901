"""`tamto_testing.needs`: a test whose tool is missing skips on a developer's machine and
fails under CI=true, whether it says so with the mark or from inside the test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tamto_testing.needs import in_ci, missing

SUITE = """
from tamto_testing.needs import missing, needs

@needs("no frobnicator on PATH")
def test_marked():
    raise AssertionError("a test that cannot run here must not run")

def test_inside():
    missing("no frobnicator on PATH")

@needs(None)
def test_can_run():
    pass
"""


def run_suite(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    argv = [sys.executable, "-m", "pytest", "-p", "tamto_testing.plugin", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*argv, "-rA", "--strict-markers", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_a_missing_tool_skips_outside_ci(tmp_path: Path) -> None:
    done = run_suite(tmp_path, ci=None)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 2 skipped" in done.stdout, done.stdout
    assert "no frobnicator on PATH" in done.stdout


def test_a_missing_tool_fails_under_ci(tmp_path: Path) -> None:
    done = run_suite(tmp_path, ci="true")
    assert done.returncode == 1, done.stdout
    # The mark fails the test in its setup (an error), `missing` in its body.
    assert "1 failed, 1 passed, 1 error" in done.stdout, done.stdout
    assert "CI=true: a test whose tool is missing fails" in done.stdout
    assert "must not run" not in done.stdout  # the mark acts before the test's body


@pytest.mark.parametrize(("value", "ci"), [("true", True), ("1", True), ("false", False)])
def test_ci_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, ci: bool
) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci() is ci
    missing(None)  # nothing missing: nothing happens
