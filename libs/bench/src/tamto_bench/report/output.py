"""A run's results as people read them: rich tables on the terminal (`render`) and
Markdown tables for docs/benchmarks.md (`markdown`), the same rows in both."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from tamto_bench.report.summary import HEADERS, rows
from tamto_bench.report.tables import (
    CLUSTER_HEADERS,
    EPHEMERAL_HEADERS,
    FRESHNESS_HEADERS,
    FUNCTION_HEADERS,
    MQTT_HEADERS,
    cluster_rows,
    ephemeral_rows,
    freshness_rows,
    function_rows,
    mqtt_rows,
)
from tamto_bench.report.values import fmt
from tamto_bench.report.verdicts import Verdict, is_ratio, verdicts


def _extra_tables(doc: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The tables beside the summary that have rows: title, headers, rows."""
    tables = [
        ("ephemeral streams", EPHEMERAL_HEADERS, ephemeral_rows(doc)),
        ("MQTT beside mosquitto", MQTT_HEADERS, mqtt_rows(doc)),
        ("processing functions, stream to stream", FUNCTION_HEADERS, function_rows(doc)),
        ("the cluster (R=3) beside one node", CLUSTER_HEADERS, cluster_rows(doc)),
        ("freshness: ack to visible in the segment store", FRESHNESS_HEADERS, freshness_rows(doc)),
    ]
    return [table for table in tables if table[2]]


def _shown(v: Verdict) -> tuple[str, str]:
    """A verdict's measured value and bar as text (a share, a ratio or a value)."""
    unit = "%" if "ceiling" in v.target else "x" if is_ratio(v.target) else ""
    return fmt(v.value, unit), fmt(v.bar, unit)


def _table(title: str, headers: list[str]) -> Table:
    table = Table(title=title, header_style="bold")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right")
    return table


def render(doc: dict[str, Any], console: Console) -> None:
    """Print the summary, the memory peaks and the target verdicts as rich tables."""
    table = _table("tamto bench", HEADERS)
    previous = None
    for row in rows(doc):
        if previous is not None and row[1] != previous:
            table.add_section()
        previous = row[1]
        table.add_row(*row)
    console.print(table)
    for title, headers, extra in _extra_tables(doc):
        extra_table = _table(title, headers)
        for row in extra:
            extra_table.add_row(*row)
        console.print(extra_table)
    memory = Table(title="peak RSS (MiB)", header_style="bold")
    memory.add_column("system")
    memory.add_column("process")
    memory.add_column("peak", justify="right")
    for group, peaks in doc["memory_peak_rss_bytes"].items():
        for name, rss in sorted(peaks.items()):
            memory.add_row(group, name, f"{rss / 2**20:.0f}")
    console.print(memory)
    targets = Table(title="targets", header_style="bold")
    for header in ("target", "size B", "measured", "bar", ""):
        targets.add_column(header, justify="right" if header != "target" else "left")
    for v in verdicts(doc):
        met = "[green]met[/]" if v.met else "[red]missed[/]"
        targets.add_row(v.target, str(v.size), *_shown(v), met)
    console.print(targets)
    for note in doc.get("notes", []):
        console.print(f"note: {note}")


def _markdown_table(headers: list[str], table_rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(row) + " |" for row in table_rows]


def markdown(doc: dict[str, Any]) -> str:
    """The summary and the verdicts as Markdown tables (for docs/benchmarks.md)."""
    lines = _markdown_table(HEADERS, rows(doc))
    for _title, headers, extra in _extra_tables(doc):
        lines += ["", *_markdown_table(headers, extra)]
    lines += ["", "| target | size B | measured | bar | |", "|---|---|---|---|---|"]
    for v in verdicts(doc):
        value, bar = _shown(v)
        met = "met" if v.met else "**missed**"
        lines.append(f"| {v.target} | {v.size} | {value} | {bar} | {met} |")
    lines += ["", "| system | process | peak RSS MiB |", "|---|---|---|"]
    for group, peaks in doc["memory_peak_rss_bytes"].items():
        for name, rss in sorted(peaks.items()):
            lines.append(f"| {group} | {name} | {rss / 2**20:.0f} |")
    return "\n".join(lines) + "\n"
