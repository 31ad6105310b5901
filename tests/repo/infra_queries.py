"""What infra/ queries (alert rules, dashboard panels), for its tests: a renamed metric
would leave an alert silent or a panel blank forever, so each `tamto_*` name they use
must be registered in the code, and each panel's expression must return data from a
running Tamto (tests/e2e/test_prometheus.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Suffixes the Prometheus client adds to a metric's name in the exposition.
SUFFIXES = ("_total", "_count", "_sum", "_bucket")
DASHBOARDS = ROOT / "infra" / "grafana" / "dashboards"


@dataclass(frozen=True)
class PanelQuery:
    """One expression of a dashboard panel."""

    dashboard: str
    panel: str
    expr: str


def dashboard_queries() -> list[PanelQuery]:
    """Every PromQL panel expression of the generated dashboards
    (infra/grafana/dashboards.py; the tracing dashboard's are TraceQL, not these)."""
    queries = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            if panel["datasource"]["type"] != "prometheus":
                continue
            for target in panel.get("targets", []):
                queries.append(PanelQuery(path.stem, panel["title"], target["expr"]))
    return queries


def tamto_metrics(text: str) -> set[str]:
    """The `tamto_*` metric names `text` (PromQL, rules, dashboard JSON) uses."""
    return set(re.findall(r"\b(tamto_[a-z_]+)", text))


def unexported(names: set[str]) -> list[str]:
    """Those of `names` (less the client's suffixes) no service's code registers."""
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
    return missing
