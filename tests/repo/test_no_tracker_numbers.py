"""Code, comments and docs name no tracker issues.

A reader of the repository cannot follow "issue 17": the tracker is not part of it.
Comments explain the code, docs describe the system, and the history stays in git and
in CHANGELOG.md, the one file that may name issues.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
#: Where our own text lives (generated protobuf code is left out: it holds none).
SOURCES = [
    "README.md",
    "CONTRIBUTING.md",
    "docs/**/*.md",
    "examples/**/*.py",
    "pipelines/**/*.py",
    "scripts/**/*.py",
    "infra/**/*.py",
    "infra/**/*.yml",
    "infra/**/*.yaml",
    "proto/**/*.proto",
    "libs/*/src/**/*.py",
    "libs/*/tests/**/*.py",
    "services/*/src/**/*.py",
    "services/*/tests/**/*.py",
    "tests/**/*.py",
]
TRACKER = re.compile(r"\bissues?\s+#?\d+\b", re.IGNORECASE)


def tracker_references() -> list[str]:
    found = []
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")) or path == HERE:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if TRACKER.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_file_names_a_tracker_issue() -> None:
    assert tracker_references() == []


def test_the_check_sees_a_reference() -> None:
    assert TRACKER.search("# the fix for issue 17")
    assert TRACKER.search("(Issues 21 and 22)")
    assert not TRACKER.search("an issue with 3 partitions? no: issues arise")
