"""pytest-xdist workers get the heaviest test files first (`tamto_testing.file_order`),
whose weights come from a JUnit XML report of an earlier run."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tamto_testing.file_order import by_weight, read_weights, render, weights_of_report


@dataclass(frozen=True)
class Node:
    nodeid: str


def test_heavy_files_come_first_and_each_file_stays_whole_and_in_order() -> None:
    items = [Node(n) for n in ("a.py::x", "b.py::x", "a.py::y", "c.py::x", "d.py::x[1]")]
    items.append(Node("d.py::x[2]"))
    ordered = by_weight(items, {"c.py": 30.0, "d.py": 40.0, "gone.py": 99.0})
    assert [n.nodeid for n in ordered] == [
        "d.py::x[1]",
        "d.py::x[2]",
        "c.py::x",
        "a.py::x",
        "a.py::y",
        "b.py::x",
    ]


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
    )


#: A test that appends `<worker> <its file>` to `order.log`, in a file of `count` tests.
LOGGING_TEST = """
import os, pathlib, pytest

@pytest.mark.parametrize("n", range({count}))
def test_logs(n):
    with open(pathlib.Path(__file__).parent / "order.log", "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + " {name}\\n")
"""


def project_of(root: Path, files: dict[str, int]) -> Path:
    """A pytest project in `root` with test files of the given test counts."""
    (root / "pytest.ini").write_text(
        "[pytest]\naddopts = -p tamto_testing.plugin\ntamto_file_durations = durations.txt\n"
    )
    for name, count in files.items():
        (root / name).write_text(LOGGING_TEST.format(count=count, name=name))
    return root


def test_xdist_workers_start_with_the_heaviest_files(tmp_path: Path) -> None:
    """Collected (by name) or in xdist's own order (most tests first), test_a_many and
    test_b_more would come first. The run's report gives each file its seconds."""
    files = {
        "test_a_many.py": 12,
        "test_b_more.py": 8,
        "test_y_heavy.py": 1,
        "test_z_heavier.py": 1,
    }
    project = project_of(tmp_path, files)
    (project / "durations.txt").write_text(
        "# seconds path\n50 test_z_heavier.py\n40 test_y_heavy.py\n"
    )
    done = run_pytest(
        project, "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder", "--junitxml=report.xml"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    first: dict[str, str] = {}
    for line in (project / "order.log").read_text().splitlines():
        worker, name = line.split()
        first.setdefault(worker, name)
    assert sorted(first.values()) == ["test_y_heavy.py", "test_z_heavier.py"], first

    weights = weights_of_report(project / "report.xml", project)
    assert set(weights) == set(files)
    assert all(seconds >= 0 for seconds in weights.values())
    (project / "durations.txt").write_text(render({**weights, "test_y_heavy.py": 5.0}, 3.0))
    assert read_weights(project / "durations.txt") == {"test_y_heavy.py": 5.0}
