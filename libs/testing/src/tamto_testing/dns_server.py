"""A tiny authoritative DNS server on loopback, for testing `--discovery srv:...`.

Discovery (`tamto_common.discovery`) asks a real resolver over UDP; a test
points it here with `TAMTO_DISCOVERY_RESOLVER=127.0.0.1:<port>`. The server
answers from a zone given as text records (`"_tamto._tcp.tamto.test. SRV 0 5
2379 etcd-1.tamto.test."`, `"etcd-1.tamto.test. A 127.0.0.1"`), built from
dnspython's message classes: a name it has no record for gets NXDOMAIN, a
name it has other types for gets an empty answer. It runs on a thread of its
own, so it answers whether or not the test's event loop is busy.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

#: A zone: (owner name, record type) -> the answer's records.
Zone = dict[tuple[dns.name.Name, dns.rdatatype.RdataType], dns.rrset.RRset]


def parse_zone(records: Iterable[str], ttl: int = 30) -> Zone:
    """`"name TYPE data"` lines as a zone (names are absolute: end them with a dot)."""
    zone: Zone = {}
    for line in records:
        owner, kind, data = line.split(None, 2)
        name = dns.name.from_text(owner)
        rdtype = dns.rdatatype.from_text(kind)
        rrset = zone.setdefault((name, rdtype), dns.rrset.RRset(name, dns.rdataclass.IN, rdtype))
        rrset.add(dns.rdata.from_text(dns.rdataclass.IN, rdtype, data), ttl)
    return zone


class DnsServer:
    """Serves `zone` over UDP on `127.0.0.1:<port>` until `close`."""

    def __init__(self, zone: Zone) -> None:
        self.zone = zone
        self.queries: list[str] = []
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.2)
        self.port: int = self._socket.getsockname()[1]
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dns-server", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _answer(self, wire: bytes) -> bytes:
        query = dns.message.from_wire(wire)
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        (question,) = query.question
        self.queries.append(f"{question.name} {dns.rdatatype.to_text(question.rdtype)}")
        found = self.zone.get((question.name, question.rdtype))
        if found is not None:
            response.answer.append(found)
        elif not any(name == question.name for name, _ in self.zone):
            response.set_rcode(dns.rcode.NXDOMAIN)
        return response.to_wire()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                wire, peer = self._socket.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self._socket.sendto(self._answer(wire), peer)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        self._socket.close()


@contextmanager
def dns_server(records: Iterable[str]) -> Iterator[DnsServer]:
    """A `DnsServer` answering `records` (see `parse_zone`) for the block."""
    server = DnsServer(parse_zone(records))
    try:
        yield server
    finally:
        server.close()
