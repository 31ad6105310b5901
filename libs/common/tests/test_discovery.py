"""Discovery by DNS SRV: the record's order, its errors, and the config checks,
against a real DNS server on loopback (`tamto_testing.dns_server`)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tamto_common.config import ServiceConfig, load_config
from tamto_common.discovery import (
    DiscoveryError,
    SrvTarget,
    order_targets,
    resolve_etcd_endpoints,
    with_discovered_etcd,
)
from tamto_common.errors import ConfigError
from tamto_testing.dns_server import dns_server

RECORDS = [
    "_tamto._tcp.tamto.test. SRV 10 5 2381 etcd-3.tamto.test.",
    "_tamto._tcp.tamto.test. SRV 0 5 2379 etcd-1.tamto.test.",
    "_tamto._tcp.tamto.test. SRV 0 5 2380 etcd-2.tamto.test.",
    "etcd-1.tamto.test. A 127.0.0.1",
    "etcd-2.tamto.test. A 127.0.0.2",
    "etcd-3.tamto.test. A 127.0.0.3",
]


def test_lower_priority_comes_first_and_weight_decides_within_one() -> None:
    targets = [
        SrvTarget(1, 0, "backup", 1),
        SrvTarget(0, 90, "heavy", 2),
        SrvTarget(0, 10, "light", 3),
    ]
    rng = random.Random(7)
    firsts = Counter(order_targets(targets, rng)[0].host for _ in range(2000))
    assert set(firsts) == {"heavy", "light"}
    assert 0.85 < firsts["heavy"] / 2000 < 0.95
    for _ in range(50):
        assert order_targets(targets, rng)[-1].host == "backup"


async def test_resolves_the_record_in_priority_order() -> None:
    with dns_server(RECORDS) as server:
        endpoints = await resolve_etcd_endpoints("srv:_tamto._tcp.tamto.test", server.address)
    assert sorted(endpoints[:2]) == [("127.0.0.1", 2379), ("127.0.0.2", 2380)]
    assert endpoints[2] == ("127.0.0.3", 2381)


async def test_the_config_gets_the_discovered_endpoints() -> None:
    with dns_server(RECORDS[:2] + RECORDS[3:4]) as server:
        config = load_config(
            ServiceConfig,
            "router",
            ["--discovery", "srv:_tamto._tcp.tamto.test", "--discovery-resolver", server.address],
            environ={},
        )
        found = await with_discovered_etcd(config)
    assert found.etcd_hosts() == [("127.0.0.1", 2379)]


async def test_a_name_without_an_srv_record_is_named_in_the_error() -> None:
    with dns_server(RECORDS) as server:
        with pytest.raises(DiscoveryError, match=r"no SRV record _missing\._tcp\.tamto\.test"):
            await resolve_etcd_endpoints("srv:_missing._tcp.tamto.test", server.address)
        # The name exists, but has only an A record.
        with pytest.raises(DiscoveryError, match=r"no SRV record etcd-1\.tamto\.test"):
            await resolve_etcd_endpoints("srv:etcd-1.tamto.test", server.address)


async def test_targets_without_an_address_are_an_error() -> None:
    with dns_server(RECORDS[:1]) as server:
        with pytest.raises(DiscoveryError, match=r"no address for the targets .*etcd-3"):
            await resolve_etcd_endpoints("srv:_tamto._tcp.tamto.test", server.address)


async def test_a_resolver_that_does_not_answer_is_named_with_the_record() -> None:
    with dns_server([]) as server:
        address = server.address
    # Nothing listens there any more.
    with pytest.raises(
        DiscoveryError,
        match=rf"resolver {address} did not answer for SRV record _tamto\._tcp\.x within 0\.5 s",
    ):
        await resolve_etcd_endpoints("srv:_tamto._tcp.x", address, timeout_s=0.5)


@pytest.mark.parametrize(
    ("flag", "value", "problem"),
    [
        ("--discovery", "_tamto._tcp.example.org", "expected srv:<record name>"),
        ("--discovery", "srv:", "expected srv:<record name>"),
        ("--discovery-resolver", "10.0.0.1", "expected host:port"),
        ("--discovery-resolver", "10.0.0.1:53,10.0.0.2:53", "expected one host:port"),
    ],
)
def test_bad_discovery_settings_are_refused(flag: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        load_config(ServiceConfig, "router", [flag, value], environ={})
    assert flag in str(caught.value)
