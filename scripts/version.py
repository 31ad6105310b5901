"""The workspace's one version: show it, check it, or set it everywhere.

Every package under libs/ and services/ ships with the same version. The build
backend (uv_build) takes only a static `version` in each pyproject.toml, so the
root pyproject.toml holds the version and this script is the one way to change
it: `set` rewrites every member's line and refreshes uv.lock; `--check` (run by
tests/repo) fails when a member drifted.

    python scripts/version.py            # print it
    python scripts/version.py --check    # exit 1 naming members that differ
    python scripts/version.py set 0.2.0  # every pyproject.toml, then uv lock
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_VERSION_LINE = re.compile(r'^version = "[^"]*"$', re.MULTILINE)
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:[-.]?(?:a|b|rc|dev|post)\d+)?$")


def members() -> list[Path]:
    """Every package's pyproject.toml in the workspace."""
    return sorted([*ROOT.glob("libs/*/pyproject.toml"), *ROOT.glob("services/*/pyproject.toml")])


def read_version(pyproject: Path) -> str:
    version: str = tomllib.loads(pyproject.read_text())["project"]["version"]
    return version


def the_version() -> str:
    """The workspace's version: the root pyproject.toml's."""
    return read_version(ROOT / "pyproject.toml")


def drifted() -> dict[str, str]:
    """Members whose version is not the workspace's, with the version they have."""
    want = the_version()
    found = {str(p.parent.relative_to(ROOT)): read_version(p) for p in members()}
    return {name: v for name, v in found.items() if v != want}


def set_version(new: str) -> None:
    if not _SEMVER.match(new):
        raise SystemExit(f"not a version: {new!r} (expected e.g. 0.2.0 or 0.2.0rc1)")
    for pyproject in [ROOT / "pyproject.toml", *members()]:
        text = pyproject.read_text()
        pyproject.write_text(_VERSION_LINE.sub(f'version = "{new}"', text, count=1))
    uv = ROOT / ".uv" / "bin" / "uv"
    subprocess.run([str(uv) if uv.exists() else "uv", "lock"], cwd=ROOT, check=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["set"] and len(argv) == 2:
        set_version(argv[1])
        return 0
    if argv == ["--check"]:
        bad = drifted()
        for name, v in bad.items():
            print(f"{name}: {v}, the workspace is {the_version()}", file=sys.stderr)
        return 1 if bad else 0
    if not argv:
        print(the_version())
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
