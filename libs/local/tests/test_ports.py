"""Ports for servers come from below the ephemeral range, where clients never bind."""

from __future__ import annotations

import socket
from pathlib import Path

from tamto_local.ports import free_port


def test_free_ports_are_bindable_distinct_and_below_the_ephemeral_range() -> None:
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports), "a port is handed out once"
    assert all(p < ephemeral_start for p in ports)
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
