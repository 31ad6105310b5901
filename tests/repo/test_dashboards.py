"""The Grafana dashboards in infra/grafana are generated from their code and query only
metrics Tamto exports (tests/e2e/test_prometheus.py runs each against a real Prometheus)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from .infra_queries import DASHBOARDS, ROOT, dashboard_queries, tamto_metrics, unexported

#: Series that are not Tamto's own but always there: Prometheus' scrape health and the
#: process collector the Prometheus client registers by default.
STANDARD = ("up", "process_cpu_seconds_total", "process_resident_memory_bytes")
#: Names in a PromQL expression that are functions, keywords or label names.
PROMQL = frozenset(
    {"sum", "max", "by", "rate", "increase", "deriv", "histogram_quantile", "or", "vector", "le"}
)


def test_the_json_files_are_what_the_code_generates() -> None:
    checked = subprocess.run(
        [sys.executable, str(ROOT / "infra" / "grafana" / "dashboards.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr


def test_every_panel_queries_metrics_tamto_exports() -> None:
    queries = dashboard_queries()
    assert {q.dashboard for q in queries} == {
        "tamto-overview",
        "tamto-streams",
        "tamto-consumers",
        "tamto-subscriptions",
        "tamto-cluster",
    }
    names = tamto_metrics("\n".join(q.expr for q in queries))
    assert not unexported(names), f"metrics not exported by any service: {unexported(names)}"
    for query in queries:
        # Drop strings ({..="..."}), ranges ([..]) and variables before reading the names.
        bare = re.sub(r'"[^"]*"|\[[^\]]*\]|\$\w+', "", query.expr)
        words = set(re.findall(r"[a-z_][a-z0-9_]*", bare))
        labels = set(re.findall(r"(\w+)\s*[=!]~?", bare))
        grouped = {w for g in re.findall(r"by \(([^)]*)\)", bare) for w in re.split(r",\s*", g)}
        others = words - PROMQL - labels - grouped - set(STANDARD) - names
        assert not others, f"{query.dashboard} / {query.panel}: unknown names {others}"


def test_every_panel_queries_the_chosen_data_source_and_is_complete() -> None:
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        variable, kind = (
            ("tempo", "tempo")
            if path.stem == "tamto-tracing"
            else (
                "datasource",
                "prometheus",
            )
        )
        assert board["templating"]["list"][0]["name"] == variable
        assert board["templating"]["list"][0]["query"] == kind
        for panel in board["panels"]:
            where = f"{path.stem} / {panel['title']}"
            assert panel["datasource"] == {"type": kind, "uid": f"${{{variable}}}"}, where
            assert panel["options"], f"{where}: no options (Grafana draws it with none)"
            assert panel["targets"], f"{where}: no query"
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), where
