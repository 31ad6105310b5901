"""`tamto status` notes the streams whose batches a storage node quarantined, from the
node's metrics page (issue 17: quarantined batches are shown in `tamto status`)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_wsgi_server

from tamto_cli.status import DAMAGED_METRIC, QUARANTINED_METRIC, fetch_notes
from tamto_common.membership import Member


def member(service: str, metrics_address: str) -> Member:
    return Member(service, f"{service}-1", "127.0.0.1:1", metrics_address, "0", 1, time.time())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def metrics_page() -> Iterator[tuple[str, Gauge]]:
    """A metrics page with storage's quarantine gauge (a registry of its own)."""
    registry = CollectorRegistry()
    gauge = Gauge(QUARANTINED_METRIC, "batches kept aside", ["stream"], registry=registry)
    port = free_port()
    server, thread = start_wsgi_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield f"127.0.0.1:{port}", gauge
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_a_storage_node_with_quarantined_batches_gets_a_note(
    metrics_page: tuple[str, Gauge],
) -> None:
    address, gauge = metrics_page
    storage = member("storage", address)
    rows = [(storage, "SERVING"), (member("gateway", address), "SERVING")]
    assert await fetch_notes(rows) == {}
    gauge.labels("orders").inc(2)
    gauge.labels("clean").set(0)
    assert await fetch_notes(rows) == {storage.key: "quarantined: orders 2"}


async def test_a_node_that_does_not_answer_has_no_note() -> None:
    gone = member("storage", f"127.0.0.1:{free_port()}")
    assert await fetch_notes([(gone, "SERVING"), (gone, "UNREACHABLE")]) == {}


async def test_a_storage_node_with_damaged_files_gets_a_note() -> None:
    registry = CollectorRegistry()
    damaged = Gauge(DAMAGED_METRIC, "damaged files", ["stream", "partition"], registry=registry)
    quarantined = Gauge(QUARANTINED_METRIC, "kept aside", ["stream"], registry=registry)
    port = free_port()
    server, thread = start_wsgi_server(port, addr="127.0.0.1", registry=registry)
    try:
        storage = member("storage", f"127.0.0.1:{port}")
        damaged.labels("orders", "3").set(2)
        assert await fetch_notes([(storage, "SERVING")]) == {
            storage.key: "damaged: orders/3 2 files (tamto storage verify)"
        }
        quarantined.labels("orders").inc()
        assert await fetch_notes([(storage, "SERVING")]) == {
            storage.key: "quarantined: orders 1; damaged: orders/3 2 files (tamto storage verify)"
        }
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
