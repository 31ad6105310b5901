"""Ports for servers come from below the ephemeral range, where clients never bind."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from tamto_local.ports import PORT_RANGE_VARIABLE, free_port, reserve, worker_port_range


def test_free_ports_are_bindable_distinct_and_below_the_ephemeral_range() -> None:
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports), "a port is handed out once"
    assert all(p < ephemeral_start for p in ports)
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_workers_get_disjoint_ranges_below_the_ephemeral_range() -> None:
    ranges = [worker_port_range(i, 3) for i in range(3)]
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for (low, high), (next_low, _) in itertools.pairwise(ranges):
        assert low < high < next_low
    assert ranges[-1][1] < ephemeral_start
    with pytest.raises(ValueError, match="worker 3 of 3"):
        worker_port_range(3, 3)


def test_the_range_variable_confines_free_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    low, high = worker_port_range(1, 2)
    monkeypatch.setenv(PORT_RANGE_VARIABLE, f"{low}-{high}")
    ports = [free_port() for _ in range(30)]
    assert all(low <= p <= high for p in ports)


def test_reserved_ports_are_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `LocalCluster` reserves (the ports given for etcd, NATS and the gateway,
    bound only after the services' ports are chosen) stays out of `free_port`'s picks."""
    monkeypatch.setenv(PORT_RANGE_VARIABLE, "24000-24600")
    reserved = range(24000, 24300)
    reserve(*reserved)
    picked = [free_port() for _ in range(100)]
    assert not set(picked) & set(reserved)
