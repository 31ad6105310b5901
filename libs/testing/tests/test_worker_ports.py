"""Parallel test workers hand out ports from disjoint ranges
(`tamto_testing.plugin.confine_worker_ports`)."""

from __future__ import annotations

from tamto_local.ports import PORT_RANGE_VARIABLE, worker_port_range
from tamto_testing.plugin import confine_worker_ports


def test_each_xdist_worker_gets_its_own_range() -> None:
    first: dict[str, str] = {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2"}
    second: dict[str, str] = {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2"}
    assert confine_worker_ports(first) == worker_port_range(0, 2)
    assert confine_worker_ports(second) == worker_port_range(1, 2)
    assert first[PORT_RANGE_VARIABLE] != second[PORT_RANGE_VARIABLE]


def test_a_single_process_run_is_left_alone() -> None:
    environ: dict[str, str] = {}
    assert confine_worker_ports(environ) is None
    assert PORT_RANGE_VARIABLE not in environ
