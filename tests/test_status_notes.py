"""`tamto status` notes the streams whose batches a storage node quarantined, from the
node's metrics page (quarantined batches are shown in `tamto status`), a
router's under-replicated ledgers, and lists every partition's ledgers with their
replicas, marking the ones not registered; unavailable (no quorum),
under-replicated and healing ledgers each with its cause, in notes and in `--json`."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_wsgi_server
from rich.console import Console

from tamto_cli.ledger_health import Problem, all_problems, ledgers_json
from tamto_cli.status import (
    DAMAGED_METRIC,
    HEALING_METRIC,
    QUARANTINED_METRIC,
    UNDER_REPLICATED_METRIC,
    fetch_notes,
    fetch_pages,
    healing_from,
    member_notes,
    partitions_per_router,
    render_ledgers,
    render_status,
    under_replicated,
)
from tamto_common.ledgers import Ledger, LedgerList
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


async def test_a_node_that_does_not_answer_has_no_metrics_note_but_is_noted_so() -> None:
    gone = member("storage", f"127.0.0.1:{free_port()}")
    assert await fetch_notes([(gone, "SERVING")]) == {}
    assert await fetch_notes([(gone, "UNREACHABLE")]) == {gone.key: "not answering (hung?)"}


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


async def test_a_router_with_under_replicated_ledgers_gets_a_note() -> None:
    registry = CollectorRegistry()
    gauge = Gauge(UNDER_REPLICATED_METRIC, "lagging replicas", registry=registry)
    port = free_port()
    server, thread = start_wsgi_server(port, addr="127.0.0.1", registry=registry)
    try:
        router = member("router", f"127.0.0.1:{port}")
        assert await fetch_notes([(router, "SERVING")]) == {}
        gauge.set(3)
        assert await fetch_notes([(router, "SERVING")]) == {
            router.key: "under-replicated: 3 ledgers (replicas catching up)"
        }
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_ledgers_are_listed_with_their_replicas_and_a_down_one_marked() -> None:
    ensemble = ("storage-1", "storage-2", "storage-3")
    lists = [
        LedgerList(
            "orders",
            0,
            (Ledger(1, ensemble, 2, 0, 41, "closed"), Ledger(3, ensemble, 2, 42)),
        ),
        LedgerList("orders", 1, (Ledger(2, ensemble, 2, 0),)),
    ]
    live = {"storage-1", "storage-3"}
    assert under_replicated(lists[0], live) == [1, 3]
    assert under_replicated(lists[1], set(ensemble)) == []
    console = Console(record=True, width=200)
    render_ledgers(lists, dict.fromkeys(live, "SERVING"), console, {("orders", 0): "router-2"})
    text = console.export_text()
    rows = text.splitlines()
    # The owner stands on the partition's last ledger; partition 1 has none now.
    assert any("42-" in r and r.rstrip().rstrip("│ ").endswith("router-2") for r in rows)
    assert not any("0-41" in r and "router-2" in r for r in rows)
    assert any("orders/1" in r and r.rstrip().rstrip("│ ").endswith("none") for r in rows)
    assert "orders/0" in text
    assert "0-41" in text
    assert "42-" in text
    assert "storage-2 (down)" in text
    assert "2 of 3" in text
    assert "under-replicated ledgers: 3" in text


def test_each_router_shows_how_many_partitions_it_owns() -> None:
    owners = {("orders", 0): "router-1", ("orders", 1): "router-1", ("audit", 0): "router-2"}
    owned = partitions_per_router(owners)
    assert owned == {"router-1": 2, "router-2": 1}
    router, storage = member("router", "127.0.0.1:1"), member("storage", "127.0.0.1:1")
    idle = Member("router", "router-3", "127.0.0.1:1", "127.0.0.1:1", "0", 1, time.time())
    console = Console(record=True, width=200)
    render_status(
        [(router, "SERVING"), (idle, "SERVING"), (storage, "SERVING")], console, {}, owned
    )
    rows = {
        r.split("│")[2].strip(): r.split("│")[8].strip()
        for r in console.export_text().splitlines()
        if r.count("│") > 8 and "-" in r.split("│")[2]
    }
    assert rows == {"router-1": "2", "router-3": "0", "storage-1": ""}


ENSEMBLE = ("storage-1", "storage-2", "storage-3")


def storage_member(name: str) -> Member:
    return Member("storage", name, "127.0.0.1:1", "127.0.0.1:1", "0", 1, time.time())


def test_two_replicas_down_or_hung_leave_the_open_ledger_without_quorum() -> None:
    lists = [
        LedgerList(
            "orders",
            0,
            (Ledger(1, ENSEMBLE, 2, 0, 9, "closed"), Ledger(2, ENSEMBLE, 2, 10)),
        )
    ]
    # storage-2 is not registered (killed, its lease expired); storage-3 is registered
    # but does not answer its health check (SIGSTOP, or killed within its lease TTL).
    storage = {"storage-1": "SERVING", "storage-3": "UNREACHABLE"}
    problems = all_problems(lists, storage, {})
    hung = "storage-3 not answering (UNREACHABLE: hung, or just died)"
    assert problems == [
        Problem(
            "orders",
            0,
            1,
            "under-replicated",
            f"storage-2 down (not registered); {hung}",
            ("storage-2", "storage-3"),
        ),
        Problem(
            "orders",
            0,
            2,
            "unavailable",
            "no quorum: 1 of 3 replicas reachable, 2 needed "
            f"(storage-2 down (not registered); {hung})",
            ("storage-2", "storage-3"),
        ),
    ]
    # Notes: on the node that does not answer, and on the router owning the partition.
    rows = [
        (storage_member("storage-1"), "SERVING"),
        (storage_member("storage-3"), "UNREACHABLE"),
        (member("router", "127.0.0.1:1"), "SERVING"),
    ]
    notes = member_notes(rows, {}, frozenset(), problems, {("orders", 0): "router-1"})
    assert notes == {
        rows[1][0].key: "not answering (hung?): 2 ledgers short of it, 1 without quorum",
        rows[2][0].key: "no quorum: orders/0",
    }
    # The text lists each with its cause.
    console = Console(record=True, width=250)
    render_ledgers(lists, storage, console, {("orders", 0): "router-1"})
    text = console.export_text()
    assert "storage-3 (not answering)" in text
    assert "under-replicated ledgers: 2, unavailable: 1, healing: 0" in text
    assert "orders/0 epoch 2: unavailable: no quorum: 1 of 3 replicas reachable" in text
    # And --json: owner, ledgers, each replica's state, the problems.
    (entry,) = ledgers_json(lists, storage, {}, {("orders", 0): "router-1"})
    assert entry["owner"] == "router-1"
    current = entry["ledgers"][-1]  # type: ignore[index]
    assert [(r["node"], r["state"]) for r in current["replicas"]] == [
        ("storage-1", "up"),
        ("storage-2", "down"),
        ("storage-3", "not answering"),
    ]
    assert [p["state"] for p in entry["problems"]] == [  # type: ignore[attr-defined]
        "under-replicated",
        "unavailable",
    ]


def test_one_replica_down_is_under_replicated_but_available() -> None:
    lists = [LedgerList("orders", 1, (Ledger(4, ENSEMBLE, 2, 0),))]
    storage = {"storage-1": "SERVING", "storage-2": "SERVING"}
    assert [(p.state, p.cause) for p in all_problems(lists, storage, {})] == [
        ("under-replicated", "storage-3 down (not registered)")
    ]
    assert all_problems(lists, {**storage, "storage-3": "SERVING"}, {}) == []


async def test_a_replica_the_owner_heals_is_shown_healing_with_why() -> None:
    registry = CollectorRegistry()
    gauge = Gauge(
        HEALING_METRIC, "healing", ["stream", "partition", "replica", "reason"], registry=registry
    )
    port = free_port()
    server, thread = start_wsgi_server(port, addr="127.0.0.1", registry=registry)
    try:
        router = member("router", f"127.0.0.1:{port}")
        gauge.labels("orders", "2", "storage-3", "catching up").set(1)
        pages = await fetch_pages([(router, "SERVING")])
        healing = healing_from(pages)
        assert healing == {("orders", 2): {"storage-3": "catching up"}}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    lists = [LedgerList("orders", 2, (Ledger(5, ENSEMBLE, 2, 0),))]
    storage = dict.fromkeys(ENSEMBLE, "SERVING")
    problems = all_problems(lists, storage, healing)
    assert [(p.state, p.cause, p.nodes) for p in problems] == [
        ("healing", "storage-3 catching up", ("storage-3",))
    ]
    owners = {("orders", 2): "router-1"}
    notes = member_notes([(router, "SERVING")], pages, frozenset(), problems, owners)
    assert notes == {router.key: "healing: orders/2"}
    console = Console(record=True, width=250)
    render_ledgers(lists, storage, console, owners, healing)
    text = console.export_text()
    assert "storage-3 (healing)" in text
    assert "orders/2 epoch 5: healing: storage-3 catching up" in text
