"""Finding the cluster's etcd through a DNS SRV record instead of a static list.

A node is told where etcd is either statically (`--etcd-endpoints host:port,...`)
or by a DNS name (`--discovery srv:_tamto._tcp.example.org`), as Kafka clients,
etcd's own `--discovery-srv` and Consul do: the operator keeps one SRV record
up to date and every node, old or new, finds the same etcd through it. The
record is resolved once, at start-up, before the node connects: its targets are
ordered as RFC 2782 says (lowest priority first,
within one priority a random order weighted by `weight`), each target name is
resolved to its addresses with the same resolver, and the result replaces
`etcd_endpoints` in the service's config, so everything after start-up
(registration, leases, reconnects) uses one list.

A name with no SRV record, a record that says "no service here" (target `.`),
targets without addresses, or a resolver that does not answer stop the start
with a `DiscoveryError` naming the record (and the resolver), printed by the
process edge as one line, exit code 1.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import TypeVar

import dns.asyncresolver
import dns.exception
import dns.rdatatype
import dns.resolver
import structlog

from tamto_common.config import ServiceConfig, parse_endpoints, srv_name
from tamto_common.errors import Unavailable

#: How long the whole lookup (the SRV record and its targets' addresses) may take.
LOOKUP_TIMEOUT_S = 5.0
C = TypeVar("C", bound=ServiceConfig)
log = structlog.get_logger(__name__)


class DiscoveryError(Unavailable):
    """The discovery record could not be resolved to etcd endpoints; names the record."""


@dataclass(frozen=True, slots=True)
class SrvTarget:
    """One answer of an SRV record: where an etcd member listens."""

    priority: int
    weight: int
    host: str
    port: int


def order_targets(targets: list[SrvTarget], rng: random.Random | None = None) -> list[SrvTarget]:
    """`targets` in the order RFC 2782 asks clients to try them.

    Lowest priority first; within one priority, repeatedly pick one at random with
    a chance proportional to its weight (weight-0 targets only get a small chance,
    as the RFC says, by counting them as weight 0 placed first in the running sum).
    """
    rng = rng or random.Random()
    ordered: list[SrvTarget] = []
    for priority in sorted({t.priority for t in targets}):
        left = sorted((t for t in targets if t.priority == priority), key=lambda t: t.weight)
        while left:
            total = sum(t.weight for t in left)
            pick = rng.randint(0, total)
            running = 0
            for index, target in enumerate(left):
                running += target.weight
                if running >= pick:
                    ordered.append(left.pop(index))
                    break
    return ordered


def _resolver(address: str) -> dns.asyncresolver.Resolver:
    if not address:
        return dns.asyncresolver.Resolver()
    ((host, port),) = parse_endpoints(address)
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers = [host]
    resolver.port = port
    return resolver


async def resolve_etcd_endpoints(
    discovery: str, resolver_address: str = "", timeout_s: float = LOOKUP_TIMEOUT_S
) -> list[tuple[str, int]]:
    """The etcd (host, port) list a `srv:<name>` discovery setting names, in RFC 2782 order.

    Raises `DiscoveryError` naming the record when it cannot be resolved.
    """
    name = srv_name(discovery)
    resolver = _resolver(resolver_address)
    resolver.lifetime = timeout_s
    asked = f"resolver {resolver_address}" if resolver_address else "the system's resolver"
    try:
        answer = await resolver.resolve(name, dns.rdatatype.SRV)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        raise DiscoveryError(f"discovery: no SRV record {name} ({asked})") from None
    except dns.exception.Timeout:
        raise DiscoveryError(
            f"discovery: {asked} did not answer for SRV record {name} within {timeout_s:g} s"
        ) from None
    except dns.exception.DNSException as exc:
        raise DiscoveryError(f"discovery: SRV record {name} ({asked}): {exc}") from None
    targets = [
        SrvTarget(r.priority, r.weight, r.target.to_text(omit_final_dot=True), r.port)
        for r in answer
    ]
    if all(not t.host for t in targets):
        raise DiscoveryError(f"discovery: SRV record {name} says no service is there (target '.')")
    endpoints: list[tuple[str, int]] = []
    for target in order_targets([t for t in targets if t.host]):
        try:
            addresses = await resolver.resolve(target.host, dns.rdatatype.A)
        except dns.exception.DNSException as exc:
            log.warning(
                "discovery target has no address", record=name, target=target.host, error=str(exc)
            )
            continue
        endpoints += [(a.to_text(), target.port) for a in addresses]
    if not endpoints:
        hosts = ", ".join(t.host for t in targets)
        raise DiscoveryError(f"discovery: no address for the targets of SRV record {name}: {hosts}")
    return endpoints


async def with_discovered_etcd(config: C) -> C:
    """`config` with `etcd_endpoints` resolved from `config.discovery`, when that is set."""
    if not config.discovery:
        return config
    endpoints = await resolve_etcd_endpoints(config.discovery, config.discovery_resolver)
    joined = ",".join(f"{host}:{port}" for host, port in endpoints)
    log.info("discovered etcd", record=srv_name(config.discovery), endpoints=joined)
    return dataclasses.replace(config, etcd_endpoints=joined)
