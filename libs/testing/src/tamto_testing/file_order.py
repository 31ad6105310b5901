"""The order in which pytest-xdist workers get test files: the longest first.

With `--dist loadfile` a worker takes one file at a time, and the run ends when the
last file does: a long file handed out near the end keeps one worker busy while the
other has nothing left. Handed out longest first, with the many short files last,
the workers finish close together (xdist's own order, `--loadscope-reorder`, is by
the number of tests in a file, which puts a long file of few tests last).

A file's weight is its seconds in an earlier run, read from a file of
``<seconds> <path>`` lines (the ini option `tamto_file_durations`; `python -m
tamto_testing.file_order REPORT.xml` writes one from a JUnit XML report). A test
file it does not name comes after those it names, in collection order. A stale
weight changes only the order, never which tests run.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar


class HasNodeId(Protocol):
    @property
    def nodeid(self) -> str: ...


Item = TypeVar("Item", bound=HasNodeId)


def file_of(nodeid: str) -> str:
    """The test file of a pytest node id (``tests/e2e/test_dedup.py::test_x[a]``)."""
    return nodeid.split("::", 1)[0]


def by_weight(items: Sequence[Item], weights: Mapping[str, float]) -> list[Item]:
    """`items` with their files' heaviest first; a file's tests stay together and in
    order, unlisted files keep their order after the listed ones."""
    first: dict[str, int] = {}
    for item in items:
        first.setdefault(file_of(item.nodeid), len(first))

    def key(item: Item) -> tuple[float, int]:
        path = file_of(item.nodeid)
        return -weights.get(path, 0.0), first[path]

    return sorted(items, key=key)


def read_weights(path: Path) -> dict[str, float]:
    """``<seconds> <path>`` per line (``#`` starts a comment); {} when `path` is absent."""
    if not path.is_file():
        return {}
    weights: dict[str, float] = {}
    for line in path.read_text().splitlines():
        line = line.partition("#")[0].strip()
        if line:
            seconds, name = line.split(maxsplit=1)
            weights[name] = float(seconds)
    return weights


def weights_of_report(report: Path, root: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of each of its tests) from a
    JUnit XML report of a run in `root`. A testcase's `classname` is the file's dotted
    module path, with a test class's name after it when there is one."""
    weights: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        parts = case.get("classname", "").split(".")
        while parts and not (root / Path(*parts).with_suffix(".py")).is_file():
            parts.pop()
        if parts:
            name = Path(*parts).with_suffix(".py").as_posix()
            weights[name] = weights.get(name, 0.0) + float(case.get("time") or 0)
    return weights


def render(weights: Mapping[str, float], at_least_s: float) -> str:
    """The weights file: heaviest first, files under `at_least_s` left out."""
    lines = [
        "# Seconds per test file in one run of the suite, the heaviest first: pytest-xdist",
        "# workers get files in this order (tamto_testing.file_order). Written by",
        "# `python -m tamto_testing.file_order REPORT.xml > THIS FILE` from a JUnit XML report.",
    ]
    heavy = sorted(((s, n) for n, s in weights.items() if s >= at_least_s), reverse=True)
    lines += [f"{seconds:.0f} {name}" for seconds, name in heavy]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a JUnit XML report (pytest --junitxml)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="where the run ran")
    parser.add_argument("--at-least", type=float, default=2.0, help="seconds to be listed")
    args = parser.parse_args(argv)
    sys.stdout.write(render(weights_of_report(args.report, args.root), args.at_least))


if __name__ == "__main__":
    main()
