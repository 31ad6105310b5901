"""One trace from producer to consumer, received as real OTLP: the services export
their spans over OTLP/gRPC to a tiny collector in the test (the `opentelemetry-proto`
TraceService), the test's own SDK spans go there too, and the span tree of one
message is checked end to end: the application's span, the producer's publish span
under it, the gateway's, router's and storage's (append, and fsync under it) spans
under the publish span, and the consumer's process span continuing it. Once more
across a router restart: a message published before it is consumed after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import tamto_sdk
from tamto_local.ports import free_port
from tamto_sdk.tracing import processing
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e

STREAM = "traced"


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps every span exported to it. A threaded server: the test's own exporter
    sends from the event loop's thread, and waits for the answer."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []

    def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            service = attributes.get("service.name", "")
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        ReceivedSpan(
                            service,
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                        )
                    )
        return trace_service_pb2.ExportTraceServiceResponse()

    def tree(self, trace_id: str) -> dict[str, ReceivedSpan]:
        """The trace's spans by name (each name once in these tests)."""
        return {s.name: s for s in self.spans if s.trace_id == trace_id}


@pytest.fixture(scope="module")
def collector() -> Iterator[tuple[Collector, str]]:
    """One collector for the module: the application's tracer provider below can be set
    once per process, so every test of the module exports to the same endpoint."""
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    received = Collector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(received, server)  # type: ignore[no-untyped-call]
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield received, f"http://127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.fixture(scope="module")
def app_tracing(collector: tuple[Collector, str]) -> Iterator[TracerProvider]:
    """The test process traces as an application would, exporting to the collector."""
    provider = TracerProvider(resource=Resource.create({"service.name": "app"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector[1], insecure=True))
    )
    trace.set_tracer_provider(provider)  # once per process: later calls are ignored
    yield provider
    provider.force_flush()
    # The provider stays the process's (it cannot be unset): shut its exporter down, or
    # a later test's span in this worker blocks its event loop retrying the export to
    # the collector stopped above.
    provider.shutdown()


def services_env(endpoint: str) -> dict[str, str]:
    return {
        "TAMTO_TRACE_EXPORTER": "otlp-grpc",
        "TAMTO_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


async def publish_traced(client: tamto_sdk.Client, payload: bytes) -> str:
    """Publish one message under an application span; the trace id."""
    tracer = trace.get_tracer("test-app")
    with tracer.start_as_current_span("place order") as span:
        async with client.producer(STREAM) as producer:
            await producer.send_and_wait(payload)
        return format(span.get_span_context().trace_id, "032x")


def check_tree(tree: dict[str, ReceivedSpan], direct: bool) -> None:
    app = tree["place order"]
    publish = tree[f"publish {STREAM}"]
    assert publish.parent_id == app.span_id
    hops = [
        ("tamto.gateway.publish", "tamto-gateway"),
        ("tamto.router.append", "tamto-router"),
        ("tamto.storage.append", "tamto-storage"),
    ]
    for hop, service in hops[1:] if direct else hops:
        assert tree[hop].parent_id == publish.span_id, hop
        assert tree[hop].service == service
    assert tree["tamto.storage.fsync"].parent_id == tree["tamto.storage.append"].span_id
    assert tree[f"process {STREAM}"].parent_id == publish.span_id


NAMES = {
    "place order",
    f"publish {STREAM}",
    "tamto.gateway.publish",
    "tamto.router.append",
    "tamto.storage.append",
    "tamto.storage.fsync",
    f"process {STREAM}",
}
#: The direct path (the SDK's default) publishes to the owning router: no gateway hop.
DIRECT_NAMES = NAMES - {"tamto.gateway.publish"}


async def consume_and_process(client: tamto_sdk.Client, count: int) -> None:
    async with client.consumer(STREAM, "shipping") as consumer:
        done = 0
        while done < count:
            batch = await consumer.receive_batch(max_messages=count, timeout_s=30)
            assert len(batch) > 0, f"only {done} of {count} came"
            for message in batch:
                with processing(message):
                    consumer.ack(message)
                done += 1
        await consumer.flush_acks(timeout_s=10)


@pytest.mark.parametrize("direct", [False, True], ids=["through-gateway", "direct"])
async def test_one_trace_from_producer_to_consumer_across_a_router_restart(
    direct: bool,
    tamto_infra: Infra,
    tmp_path: Path,
    collector: tuple[Collector, str],
    app_tracing: TracerProvider,
) -> None:
    received, endpoint = collector
    env = services_env(endpoint)
    every = {service: env for service in ("gateway", "router", "storage", "auth")}
    with TestCluster(tmp_path / "cluster", tamto_infra).running(every) as cluster:
        options = tamto_sdk.ClientOptions(direct=direct)
        async with tamto_sdk.connect(
            cluster.url, api_key=cluster.credential, options=options
        ) as client:
            await client.streams.ensure(STREAM, partitions=1)
            before = await publish_traced(client, b"order 1")
            await consume_and_process(client, 1)

            def whole(trace_id: str) -> bool:
                app_tracing.force_flush()
                names = set(received.tree(trace_id))
                return names >= (DIRECT_NAMES if direct else NAMES)

            await eventually(lambda: whole(before), 30, "every span of the first message")
            check_tree(received.tree(before), direct)

            across = await publish_traced(client, b"order 2")
            await asyncio.to_thread(cluster.stop, "router")
            await asyncio.to_thread(cluster.start, "router", extra_env=env)
            await consume_and_process(client, 1)
            await eventually(lambda: whole(across), 30, "every span across the restart")
            check_tree(received.tree(across), direct)
