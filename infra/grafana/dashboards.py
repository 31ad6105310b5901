"""Tamto's Grafana dashboards, generated from code (grafana-foundation-sdk).

Why code: every panel is one PromQL expression over a metric a Tamto service exports,
listed once (in dashboard_panels.py beside this file), so a renamed metric is caught
by a test instead of leaving a panel blank, and the dashboards can be reviewed as a
diff. This module draws those specs as Grafana panels and writes the JSON. Run

    python infra/grafana/dashboards.py           # rewrite infra/grafana/dashboards/*.json
    python infra/grafana/dashboards.py --check   # fail if the JSON files are stale

The JSON files are what Grafana imports (infra/README.md). tests/repo/test_dashboards.py
checks they are current and name only exported metrics; tests/e2e/test_prometheus.py runs
every panel's expression against a real Prometheus scraping a running Tamto.

Every dashboard has a `$datasource` variable (the Prometheus its panels query), and the
per-stream ones a `$stream` variable. The tracing dashboard (TraceQL searches on a Tempo
data source) is built in tracing_dashboard.py and written here with the others.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import tracing_dashboard  # beside this file: the Tempo one, written with these
from dashboard_panels import DASHBOARDS, DashboardSpec, PanelSpec  # beside this file
from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BigValueGraphMode,
    LegendDisplayMode,
    LegendPlacement,
    TooltipDisplayMode,
)
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

OUT = Path(__file__).resolve().parent / "dashboards"
#: The Prometheus data source every panel queries: the dashboard's `datasource` variable.
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")


def _kind(spec: PanelSpec) -> stat.Panel | timeseries.Panel:
    """A stat of each series' latest value, or lines with their legend below."""
    if spec.stat:
        return (
            stat.Panel()
            .reduce_options(gc.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
            .graph_mode(BigValueGraphMode.AREA)
        )
    return (
        timeseries.Panel()
        .legend(
            gc.VizLegendOptions()
            .show_legend(True)
            .display_mode(LegendDisplayMode.LIST)
            .placement(LegendPlacement.BOTTOM)
        )
        .tooltip(gc.VizTooltipOptions().mode(TooltipDisplayMode.MULTI))
    )


def _panel(spec: PanelSpec) -> stat.Panel | timeseries.Panel:
    panel = _kind(spec)
    panel.title(spec.title).unit(spec.unit).datasource(DATASOURCE).span(8).height(8)
    if spec.description:
        panel.description(spec.description)
    for i, query in enumerate(spec.queries):
        target = prometheus.Dataquery().expr(query.expr).ref_id(chr(ord("A") + i))
        panel.with_target(target.legend_format(query.legend) if query.legend else target)
    return panel


def build(spec: DashboardSpec) -> gd.Dashboard:
    board = (
        gd.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(["tamto"])
        .time("now-1h", "now")
        .refresh("30s")
        .with_variable(gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )
    if spec.per_stream:
        board.with_variable(
            gd.QueryVariable("stream")
            .label("Stream")
            .datasource(DATASOURCE)
            .query("label_values(tamto_storage_appended_messages_total, stream)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
    for panel in spec.panels:
        board.with_panel(_panel(panel))
    return board


def render(board: gd.Dashboard) -> str:
    """The dashboard's JSON as Grafana imports it."""
    return json.dumps(board.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a JSON file is stale")
    args = parser.parse_args(argv)
    stale = []
    boards = {spec.uid: build(spec) for spec in DASHBOARDS}
    boards[tracing_dashboard.UID] = tracing_dashboard.build()
    for uid, board in boards.items():
        path = OUT / f"{uid}.json"
        text = render(board)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            OUT.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"stale dashboards: {', '.join(stale)}; run python {__file__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
