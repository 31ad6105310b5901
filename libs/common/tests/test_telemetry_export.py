"""Trace export: OTLP over gRPC with TLS (verified against a CA) and over HTTP, each
received by a real collector endpoint; bad endpoints refused as configuration errors;
the sample ratio applied to traces that start here; and the message side: trace
context read from a batch's headers, nothing decoded while tracing is off."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from tamto_common.config import TraceSettings
from tamto_common.errors import ConfigError
from tamto_common.message_traces import message_contexts, message_span
from tamto_common.telemetry import span_exporter, tracing_enabled
from tamto_local.ports import free_port
from tamto_local.tls import issue, make_ca
from tamto_protocol.batch import BatchColumns, encode_batch

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def span_names(request: trace_service_pb2.ExportTraceServiceRequest) -> list[str]:
    return [s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.names: list[str] = []

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.names.extend(span_names(request))
        return trace_service_pb2.ExportTraceServiceResponse()


def export_one(settings: TraceSettings, name: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter(settings)))
    with provider.get_tracer("test").start_as_current_span(name):
        pass
    provider.shutdown()


@pytest.fixture
def tls_collector(tmp_path: Path) -> Iterator[tuple[Collector, str, Path]]:
    ca = make_ca(tmp_path)
    cert = issue(tmp_path, "collector")
    credentials = grpc.ssl_server_credentials([(cert.key.read_bytes(), cert.cert.read_bytes())])
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    received = Collector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(received, server)  # type: ignore[no-untyped-call]
    port = free_port()
    server.add_secure_port(f"127.0.0.1:{port}", credentials)
    server.start()
    try:
        yield received, f"https://localhost:{port}", ca.cert
    finally:
        server.stop(None)


def test_otlp_over_grpc_with_tls_reaches_the_collector(
    tls_collector: tuple[Collector, str, Path],
) -> None:
    received, endpoint, ca = tls_collector
    export_one(TraceSettings("otlp-grpc", endpoint, str(ca)), "over tls")
    assert received.names == ["over tls"]


@pytest.fixture
def http_collector() -> Iterator[tuple[list[str], str]]:
    names: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            names.extend(f"{self.path} {n}" for n in span_names(request))
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield names, f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def test_otlp_over_http_reaches_the_collector(http_collector: tuple[list[str], str]) -> None:
    names, endpoint = http_collector
    export_one(TraceSettings("otlp-http", endpoint), "over http")
    assert names == ["/v1/traces over http"]


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        (TraceSettings("otlp", "127.0.0.1:4317"), "must start with http:// .* or https://"),
        (TraceSettings("otlp-http", "ftp://collector/v1/traces"), "must start with http://"),
        (TraceSettings("otlp", "https://c:4317", "/no/such/ca.pem"), "not a readable file"),
    ],
)
def test_bad_endpoints_are_configuration_errors(settings: TraceSettings, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        span_exporter(settings)


def test_the_sample_ratio_applies_to_traces_starting_here_and_parents_decide_the_rest() -> None:
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("root") as root:
        assert not root.get_span_context().trace_flags.sampled
    sampled = TracerProvider().get_tracer("test").start_span("upstream")
    with tracer.start_as_current_span("child", context=trace.set_span_in_context(sampled)) as c:
        assert c.get_span_context().trace_flags.sampled


def batch(headers: list[dict[str, str] | None]) -> bytes:
    n = len(headers)
    return encode_batch(BatchColumns([b"x"] * n, [None] * n, headers, [None] * n, [None] * n))


def test_a_batch_s_distinct_trace_contexts_are_read_from_its_headers() -> None:
    other = "00-11111111111111111111111111111111-2222222222222222-01"
    contexts = message_contexts(
        batch([{"traceparent": TRACEPARENT}, None, {"a": "b"}, {"traceparent": other}])
    )
    assert [format(c.trace_id, "032x") for c in contexts] == [
        "0af7651916cd43dd8448eb211c80319c",
        "11111111111111111111111111111111",
    ]
    assert message_contexts(batch([None, {"traceparent": "garbage"}])) == []


def test_with_tracing_off_message_span_decodes_nothing() -> None:
    assert not tracing_enabled()
    with message_span("t", "span", [b"not even arrow"], "s", 0) as span:
        assert span is None
