"""The tracing dashboard: Tamto's spans found in Tempo (or any data source speaking
Tempo's API over the traces Tamto exports by OTLP), by TraceQL searches.

Its own module because its data source and panels differ from the Prometheus ones in
dashboards.py, which writes it with the others. The searches name only the spans Tamto
emits (README, Operations, "Tracing"): the SDK's `publish <stream>` (PRODUCER) and
`process <stream>` (CONSUMER), the services' `tamto.gateway.publish`,
`tamto.router.append`, `tamto.storage.append` and `tamto.storage.fsync`;
tests/repo/test_dashboards.py checks each against the span tree that
tests/e2e/test_tracing.py receives.
"""

from __future__ import annotations

from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import table, tempo
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableHide, VariableOption

UID = "tamto-tracing"
TEMPO = DataSourceRef(type_val="tempo", uid="${tempo}")
#: Rows a search returns (the traces Tempo finds, newest first).
LIMIT = 20
#: The choices of the `slow` threshold (TraceQL durations); the third is the default.
SLOW = ("10ms", "50ms", "100ms", "250ms", "1s")


@dataclass(frozen=True)
class Search:
    """One panel: a TraceQL search and why it is there."""

    title: str
    traceql: str
    description: str


SEARCHES = (
    Search(
        "Publishes",
        '{ kind = producer && name =~ "publish .+" '
        '&& span.messaging.destination.name =~ "$stream" }',
        "Producers' publish spans (SDK), one per send or batch; open one for its whole tree: "
        "gateway, router, storage append and fsync, and the consumers' process spans.",
    ),
    Search(
        "Messages processed by consumers",
        '{ kind = consumer && name =~ "process .+" '
        '&& span.messaging.destination.name =~ "$stream" }',
        "Consumers' process spans, each a child of the publish span of its message.",
    ),
    Search(
        "Publish to process",
        '{ name =~ "publish .+" } > { name =~ "process .+" && duration > $slow }',
        "Traces where a consumer processed a message for longer than $slow.",
    ),
    Search(
        "Failed gateway publishes",
        '{ resource.service.name = "tamto-gateway" && name = "tamto.gateway.publish" '
        "&& status = error }",
        "Publishes the gateway answered with an error.",
    ),
    Search(
        "Slow router appends",
        '{ name = "tamto.router.append" && span.tamto.stream =~ "$stream" && duration > $slow }',
        "Appends the partition's owner took longer than $slow over (replication included).",
    ),
    Search(
        "Slow storage appends",
        '{ name = "tamto.storage.append" && span.tamto.stream =~ "$stream" && duration > $slow }',
        "A storage node's appends slower than $slow.",
    ),
    Search(
        "Slow fsyncs",
        '{ name = "tamto.storage.fsync" && duration > $slow }',
        "Storage nodes' fsyncs slower than $slow: the disk, when appends are slow too.",
    ),
)


def _panel(search: Search) -> table.Panel:
    query = tempo.TempoQuery().query_type("traceql").query(search.traceql).limit(LIMIT).ref_id("A")
    return (
        table.Panel()
        .title(search.title)
        .description(search.description)
        .datasource(TEMPO)
        .show_header(True)
        .with_target(query)
        .span(12)
        .height(8)
    )


def build() -> gd.Dashboard:
    """The dashboard: a Tempo data source variable, a stream and a slowness threshold."""
    board = (
        gd.Dashboard("Tamto / Tracing")
        .uid(UID)
        .description("Spans of messages from producer to consumer, by TraceQL search.")
        .tags(["tamto"])
        .time("now-1h", "now")
        .refresh("30s")
        .with_variable(gd.DatasourceVariable("tempo").label("Tempo").type("tempo"))
        .with_variable(gd.TextBoxVariable("stream").label("Stream (regex)").default_value(".+"))
        .with_variable(
            gd.CustomVariable("slow")
            .label("Slower than")
            .values(",".join(SLOW))
            .current(VariableOption(selected=True, text=SLOW[2], value=SLOW[2]))
            .hide(VariableHide.DONT_HIDE)
        )
    )
    for search in SEARCHES:
        board.with_panel(_panel(search))
    return board
