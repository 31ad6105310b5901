"""OpenTelemetry tracing and Prometheus metrics for a service process.

Traces go to an OTLP collector over gRPC (`otlp`, `otlp-grpc`) or HTTP
(`otlp-http`), over TLS when the endpoint is `https://` (verified against
`--otlp-ca-file`, else the system's roots), in plaintext when it is `http://`.
`--trace-sample-ratio` samples that share of the traces that start here; a span
whose parent (a message's trace context, an incoming call's) was sampled or not
follows it. With the exporter `none`, the default, no provider is installed and
the data path does no tracing work at all (`tracing_enabled`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from prometheus_client import start_http_server

from tamto_common.config import TraceSettings
from tamto_common.errors import ConfigError


def span_exporter(settings: TraceSettings) -> SpanExporter:
    """The exporter `settings` name (not `none`); ConfigError for a bad endpoint."""
    if settings.exporter == "console":
        return ConsoleSpanExporter()
    scheme = urlparse(settings.endpoint).scheme
    if scheme not in ("http", "https"):
        raise ConfigError(
            "--otlp-endpoint",
            f"{settings.endpoint!r} must start with http:// (plaintext) or https:// (TLS)",
        )
    ca = settings.ca_file or None
    if ca is not None and not Path(ca).is_file():
        raise ConfigError("--otlp-ca-file", f"{ca} is not a readable file")
    if settings.exporter == "otlp-http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter(endpoint=settings.endpoint, certificate_file=ca)
    import grpc
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    if scheme == "http":
        return OTLPSpanExporter(endpoint=settings.endpoint, insecure=True)
    roots = Path(ca).read_bytes() if ca is not None else None
    return OTLPSpanExporter(
        endpoint=settings.endpoint,
        insecure=False,
        credentials=grpc.ssl_channel_credentials(root_certificates=roots),
    )


def setup_tracing(service: str, settings: TraceSettings) -> TracerProvider | None:
    """Install a tracer provider exporting as `settings` say ("none" leaves tracing off)."""
    if settings.exporter == "none":
        return None
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"tamto-{service}"}),
        sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(span_exporter(settings)))
    trace.set_tracer_provider(provider)
    global _installed
    _installed = True
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


#: Whether `setup_tracing` installed a provider (a flag: the data path asks per batch,
#: and `trace.get_tracer_provider()` costs about half a microsecond).
_installed = False


def tracing_enabled() -> bool:
    """True once `setup_tracing` installed an exporting tracer provider in this process."""
    return _installed


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
