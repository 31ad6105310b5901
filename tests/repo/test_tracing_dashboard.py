"""The tracing dashboard (infra/grafana/tracing_dashboard.py) searches spans Tamto
emits: each TraceQL span name it names matches a span of the tree that
tests/e2e/test_tracing.py receives over real OTLP from a running Tamto, every span of
that tree is searched by some panel, and each attribute it filters on is one Tamto's
code sets. A renamed span would otherwise leave a panel empty forever."""

from __future__ import annotations

import json
import re

from ..e2e.test_tracing import NAMES, STREAM
from .infra_queries import DASHBOARDS, ROOT

BOARD = DASHBOARDS / "tamto-tracing.json"
#: What emits the spans: the SDK's publish and process spans, the services' own.
EMITTERS = (
    ROOT / "libs" / "sdk" / "src" / "tamto_sdk" / "tracing.py",
    ROOT / "libs" / "common" / "src" / "tamto_common" / "message_traces.py",
)
#: TraceQL's intrinsic fields and keywords (not attributes of Tamto's).
INTRINSIC = {"name", "kind", "status", "duration"}


def searches() -> dict[str, str]:
    """Each panel's TraceQL, by title."""
    board = json.loads(BOARD.read_text())
    out = {}
    for panel in board["panels"]:
        [target] = panel["targets"]
        assert target["queryType"] == "traceql", panel["title"]
        out[panel["title"]] = target["query"]
    return out


def name_matchers(traceql: str) -> list[tuple[str, str]]:
    """The span-name conditions of a TraceQL query: (operator, value)."""
    return re.findall(r'(?<![\w.])name\s*(=~|=)\s*"([^"]*)"', traceql)


def matches(operator: str, value: str, name: str) -> bool:
    return name == value if operator == "=" else re.fullmatch(value, name) is not None


def test_the_dashboard_is_valid_traceql_over_its_own_variables() -> None:
    board = json.loads(BOARD.read_text())
    defined = {v["name"] for v in board["templating"]["list"]}
    assert defined == {"tempo", "stream", "slow"}
    for title, traceql in searches().items():
        assert traceql.count("{") == traceql.count("}") > 0, title
        assert traceql.count('"') % 2 == 0, title
        assert set(re.findall(r"\$(\w+)", traceql)) <= defined - {"tempo"}, title
        # Spansets joined by a structural or logical operator, conditions by && or ||.
        for spanset in re.findall(r"\{([^}]*)\}", traceql):
            for condition in re.split(r"&&|\|\|", spanset):
                assert re.fullmatch(
                    r'\s*[\w.]+\s*(=~|!=|=|>|<)\s*("[^"]*"|\$?\w+)\s*', condition
                ), f"{title}: {condition!r}"


def test_every_span_name_searched_is_one_tamto_emits() -> None:
    emitted = {name for name in NAMES if name != "place order"}  # that one is the test app's
    searched: set[str] = set()
    for title, traceql in searches().items():
        matchers = name_matchers(traceql)
        assert matchers, f"{title}: searches no span by name"
        for operator, value in matchers:
            hits = {n for n in emitted if matches(operator, value, n)}
            assert hits, f"{title}: no span Tamto emits is named {operator} {value!r}"
            searched |= hits
    assert searched == emitted, f"spans no panel searches: {emitted - searched}"
    assert {f"publish {STREAM}", f"process {STREAM}"} <= searched


def test_every_attribute_searched_is_one_tamto_sets() -> None:
    code = "\n".join(path.read_text() for path in EMITTERS)
    for title, traceql in searches().items():
        for scope, key in re.findall(r"\b(span|resource)\.([\w.]+)\s*(?:=~|!=|=)", traceql):
            if scope == "resource":
                assert key == "service.name", title
                continue
            assert f'"{key}"' in code, f"{title}: no span of Tamto's has the attribute {key}"
        fields = set(re.findall(r"\{\s*(\w+)\s*[=!<>]|&&\s*(\w+)\s*[=!<>]", traceql))
        assert {f for pair in fields for f in pair if f} <= INTRINSIC, title
