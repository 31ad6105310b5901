"""The Prometheus alert rules in infra/prometheus are valid, fire when they should, and
name only metrics Tamto exports (issue 19: what is alert-worthy after faults).

`promtool` comes from Debian's `prometheus` package (.ci/run installs it); without it
the promtool checks skip, saying so (and fail under CI=true: `tamto_testing.needs`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tamto_testing.needs import missing

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "infra" / "prometheus"
#: Suffixes the Prometheus client adds to a metric's name in the exposition.
SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        missing("promtool not installed (Debian package prometheus; .ci/run installs it)")
    return subprocess.run(
        [tool, *args], cwd=RULES, capture_output=True, text=True, check=False, timeout=120
    )


def test_the_rules_are_valid() -> None:
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_each_alert_fires_on_its_fault_and_not_on_a_healthy_system() -> None:
    tested = promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_unit_test() -> None:
    alerts = set(re.findall(r"^\s*- alert: (\w+)", (RULES / "alerts.yml").read_text(), re.M))
    tests = set(re.findall(r"alertname: (\w+)", (RULES / "alerts.test.yml").read_text()))
    assert alerts, "no alerts found"
    assert alerts <= tests, f"alerts without a unit test: {sorted(alerts - tests)}"


def test_every_metric_the_rules_name_is_exported() -> None:
    """A renamed metric would leave its alert silent forever: each name in the rules
    (less the client's suffixes) is registered somewhere in the services' code."""
    rules = (RULES / "alerts.yml").read_text()
    names = set(re.findall(r"\b(tamto_[a-z_]+)", rules))
    sources = "\n".join(
        path.read_text()
        for pattern in ("libs/*/src/**/*.py", "services/*/src/**/*.py")
        for path in ROOT.glob(pattern)
    )
    missing = []
    for name in sorted(names):
        base = next((name.removesuffix(s) for s in SUFFIXES if name.endswith(s)), name)
        if f'"{base}"' not in sources:
            missing.append(name)
    assert names, "no metrics found in the rules"
    assert not missing, f"metrics not exported by any service: {missing}"
