"""OpenTelemetry tracing and Prometheus metrics for a service process."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from prometheus_client import start_http_server

from tamto_common.errors import ConfigError


def setup_tracing(service: str, exporter: str, otlp_endpoint: str) -> TracerProvider | None:
    """Install a tracer provider exporting to `exporter` ("none" leaves tracing off)."""
    if exporter == "none":
        return None
    span_exporter: SpanExporter
    if exporter == "console":
        span_exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True)
    provider = TracerProvider(resource=Resource.create({"service.name": f"tamto-{service}"}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    trace.set_tracer_provider(provider)
    return provider


def start_metrics_server(host: str, port: int) -> int:
    """Serve Prometheus metrics on host:port (0: any free port); returns the bound port."""
    try:
        server, _thread = start_http_server(port, addr=host)
    except OSError as exc:
        raise ConfigError(
            "--metrics-port", f"cannot listen on {host}:{port}: {exc.strerror}"
        ) from None
    return int(server.server_port)


def tracing_enabled() -> bool:
    """True once `setup_tracing` installed an exporting tracer provider in this process."""
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def server_interceptors() -> list[Any]:
    """gRPC server interceptors that open a span per call (none when tracing is off)."""
    if not tracing_enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor()]  # type: ignore[no-untyped-call]


def client_interceptors() -> list[Any]:
    """gRPC client interceptors that carry the trace context to the next hop."""
    if not tracing_enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    return list(aio_client_interceptors())  # type: ignore[no-untyped-call]
