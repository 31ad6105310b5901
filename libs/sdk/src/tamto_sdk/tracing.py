"""One trace from producer to consumer: W3C trace context in message headers.

When the application traces (an OpenTelemetry tracer provider is installed and a
span is current), `send` and `send_batch` open a PRODUCER span "publish STREAM",
ended when the broker acknowledged the messages, and write its context into each
message's headers (`traceparent`, `tracestate`; a message whose headers already
carry a `traceparent` keeps it: the caller gave that message its own). The
gateway, router and storage put their spans under it (docs/sdk.md, "Tracing"),
and the consumer continues it with `processing(message)`.

With no current span (tracing off, or nothing traced at the moment) nothing is
added: the cost is one context lookup per `send`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["TRACEPARENT", "processing"]

TRACEPARENT = "traceparent"
_TRACER = "tamto_sdk"
_PROPAGATOR = TraceContextTextMapPropagator()


def tracing() -> bool:
    """Whether a sampled span is current: only then are messages given trace context."""
    return trace.get_current_span().get_span_context().is_valid


def publish_span(stream: str, messages: int) -> Span:
    """A PRODUCER span under the current one, for publishing `messages` to `stream`."""
    return trace.get_tracer(_TRACER).start_span(
        f"publish {stream}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "tamto",
            "messaging.destination.name": stream,
            "messaging.operation.type": "send",
            "messaging.batch.message_count": messages,
        },
    )


def carrier(span: Span) -> dict[str, str]:
    """The headers carrying `span`'s context."""
    headers: dict[str, str] = {}
    _PROPAGATOR.inject(headers, trace.set_span_in_context(span))
    return headers


def with_context(headers: Mapping[str, str] | None, context: Mapping[str, str]) -> dict[str, str]:
    """`headers` plus the trace context, unless they carry one of their own."""
    if headers and TRACEPARENT in headers:
        return dict(headers)
    return {**(headers or {}), **context}


def batch_headers(
    headers: Sequence[Mapping[str, str] | None] | None, count: int, context: Mapping[str, str]
) -> list[dict[str, str]]:
    """Per-message headers of a batch, each given the trace context it lacks."""
    given = headers if headers is not None else [None] * count
    return [with_context(h, context) for h in given]


def end_with(span: Span, future: asyncio.Future[Any]) -> None:
    """End `span` when `future` resolves, marked as failed if it failed."""

    def done(f: asyncio.Future[Any]) -> None:
        if f.cancelled():
            span.set_status(Status(StatusCode.ERROR, "cancelled"))
        elif f.exception() is not None:
            span.set_status(Status(StatusCode.ERROR, str(f.exception())))
        span.end()

    future.add_done_callback(done)


@contextlib.contextmanager
def processing(message: Any) -> Iterator[Span]:
    """A CONSUMER span "process STREAM" continuing the trace `message` carries (a child
    of its publish span), current for the block: ``with processing(message): ...``.

    A message without trace context gets a span under the current one (if any).
    """
    headers = message.headers or {}
    parent = _PROPAGATOR.extract(dict(headers)) if TRACEPARENT in headers else None
    with trace.get_tracer(_TRACER).start_as_current_span(
        f"process {message.stream}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "tamto",
            "messaging.destination.name": message.stream,
            "messaging.destination.partition.id": str(message.partition),
            "messaging.operation.type": "process",
            "messaging.message.id": str(message.offset),
        },
    ) as span:
        yield span
