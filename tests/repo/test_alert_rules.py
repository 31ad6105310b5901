"""The Prometheus alert rules in infra/prometheus are valid, fire when they should, and
name only metrics Tamto exports (what is alert-worthy after faults); the
Prometheus configs beside them are valid.

`promtool` comes from Debian's `prometheus` package (.ci/run installs it); without it
the promtool checks skip, saying so (and fail under CI=true: `tamto_testing.needs`).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tamto_testing.needs import missing

from .infra_queries import ROOT, tamto_metrics, unexported

RULES = ROOT / "infra" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        missing("promtool not installed (Debian package prometheus; .ci/run installs it)")
    return subprocess.run(
        [tool, *args], cwd=RULES, capture_output=True, text=True, check=False, timeout=120
    )


@pytest.mark.parametrize("config", ["prometheus.yml", "prometheus-kubernetes.yml"])
def test_the_prometheus_configs_are_valid(config: str) -> None:
    checked = promtool("check", "config", config)
    assert checked.returncode == 0, checked.stdout + checked.stderr


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
    names = tamto_metrics((RULES / "alerts.yml").read_text())
    assert names, "no metrics found in the rules"
    assert not unexported(names), f"metrics not exported by any service: {unexported(names)}"
