"""Spans of the data path, tied to the trace context each message carries.

A publish rides a long-lived pipelined stream, so no call of its own carries a
trace. The message does: the SDK writes W3C trace context (`traceparent`,
`tracestate`) into its headers when the producing application traces, and it is
stored with the message. The gateway, the router and storage open their span for
a batch as a child of its first traced message's context and link the others
(OpenTelemetry's messaging conventions for batches), so each hop shows under the
producer's publish span, as does the consumer's processing span (SDK,
`tamto_sdk.tracing`). Messages without trace context get no span.

With tracing off (no exporter: `tamto_common.telemetry.tracing_enabled`),
`message_span` returns a shared no-op and nothing is decoded: the data path pays
a fraction of a microsecond per batch and hop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import pyarrow.compute as pc
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tamto_common.telemetry import tracing_enabled
from tamto_protocol.batch import BatchFormatError, decode_batch

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_PROPAGATOR = TraceContextTextMapPropagator()


def message_contexts(arrow_ipc: bytes | memoryview) -> list[SpanContext]:
    """The distinct trace contexts the batch's messages carry, in message order."""
    try:
        headers = decode_batch(arrow_ipc).column("headers")
    except (BatchFormatError, KeyError, ValueError):
        return []
    if headers.null_count == len(headers):
        return []
    parents = pc.map_lookup(headers, TRACEPARENT, "first").to_pylist()
    states = pc.map_lookup(headers, TRACESTATE, "first").to_pylist()
    found: dict[str, SpanContext] = {}
    for parent, state in zip(parents, states, strict=True):
        if not parent or parent in found:
            continue
        carrier = {TRACEPARENT: parent, TRACESTATE: state or ""}
        context = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
        if context.is_valid:
            found[parent] = context
    return list(found.values())


#: What `message_span` gives with tracing off: one shared, reusable no-op.
_OFF: contextlib.nullcontext[None] = contextlib.nullcontext()


def message_span(
    tracer: str, name: str, batches: Iterable[bytes | memoryview], stream: str, partition: int
) -> contextlib.AbstractContextManager[Span | None]:
    """A span for handling `batches` (Arrow IPC) of a partition, child of the first
    traced message's context and linked to the other ones; None (no span) when
    tracing is off or no message is traced."""
    if not tracing_enabled():
        return _OFF
    return _message_span(tracer, name, batches, stream, partition)


@contextlib.contextmanager
def _message_span(
    tracer: str, name: str, batches: Iterable[bytes | memoryview], stream: str, partition: int
) -> Iterator[Span | None]:
    contexts: list[SpanContext] = []
    for arrow_ipc in batches:
        contexts.extend(c for c in message_contexts(arrow_ipc) if c not in contexts)
    if not contexts:
        yield None
        return
    parent = trace.set_span_in_context(NonRecordingSpan(contexts[0]))
    with trace.get_tracer(tracer).start_as_current_span(
        name,
        context=parent,
        kind=SpanKind.SERVER,
        links=[Link(c) for c in contexts[1:]],
        attributes={"tamto.stream": stream, "tamto.partition": partition},
    ) as span:
        yield span


@contextlib.contextmanager
def child_span(tracer: str, name: str, parent: Span | None) -> Iterator[Span | None]:
    """A span under `parent` (a `message_span`'s); nothing when that is None."""
    if parent is None:
        yield None
        return
    with trace.get_tracer(tracer).start_as_current_span(
        name, context=trace.set_span_in_context(parent)
    ) as span:
        yield span
