"""Every package carries the workspace's one version (scripts/version.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "version.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_every_package_has_the_workspace_version() -> None:
    shown = run()
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().count(".") >= 2
    checked = run("--check")
    assert checked.returncode == 0, checked.stderr


def test_the_check_names_a_member_that_drifted(tmp_path: Path) -> None:
    # A copy of the workspace's pyproject files with one member changed.
    for pyproject in [ROOT / "pyproject.toml", *ROOT.glob("libs/*/pyproject.toml")]:
        target = tmp_path / pyproject.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(pyproject.read_text())
    sdk = tmp_path / "libs" / "sdk" / "pyproject.toml"
    sdk.write_text(sdk.read_text().replace('version = "', 'version = "9', 1))
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "version.py").write_text(SCRIPT.read_text())
    copied = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "version.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert copied.returncode == 1
    assert "libs/sdk: 9" in copied.stderr
