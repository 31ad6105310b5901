"""Nodes find etcd through a DNS SRV record (Deliver 6: joining).

Every service of the test's cluster is given `--discovery
srv:_tamto._tcp.tamto.test` (as `TAMTO_DISCOVERY`) and a resolver on loopback
(`tamto_testing.dns_server`) whose SRV record points at the session's etcd,
while its static `TAMTO_ETCD_ENDPOINTS` names a port nobody listens on: the
cluster serves only if discovery was used. A node whose record does not
exist, or whose resolver does not answer, exits with code 1 and one line
naming the record.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import tamto_sdk
from tamto_common.config import parse_endpoints
from tamto_local.ports import free_port
from tamto_testing.cluster import TestCluster
from tamto_testing.dns_server import dns_server
from tamto_testing.infra import Infra

pytestmark = pytest.mark.e2e

RECORD = "_tamto._tcp.tamto.test"
#: Generous: a process that exits ends the wait at once; a loaded machine (load 20+)
#: took over 30 s to import a service.
START_S = 180.0


def discovery_env(record: str, resolver: str) -> dict[str, str]:
    return {
        "TAMTO_DISCOVERY": f"srv:{record}",
        "TAMTO_DISCOVERY_RESOLVER": resolver,
        # Nothing listens here: a node that ignored discovery could not start.
        "TAMTO_ETCD_ENDPOINTS": f"127.0.0.1:{free_port()}",
    }


async def test_a_cluster_found_through_an_srv_record_serves(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    ((host, port),) = parse_endpoints(tamto_infra.etcd_endpoint)
    records = [f"{RECORD}. SRV 0 10 {port} etcd-1.tamto.test.", f"etcd-1.tamto.test. A {host}"]
    with dns_server(records) as server:
        env = discovery_env(RECORD, server.address)
        cluster = TestCluster(tmp_path / "cluster", tamto_infra)
        with cluster.running({s: env for s in ("auth", "storage", "router", "gateway")}):
            assert f"{RECORD}. SRV" in server.queries
            stream = f"found-{uuid.uuid4().hex[:8]}"
            async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
                await client.streams.ensure(stream, partitions=1)
                async with client.producer(stream) as producer:
                    sent = await producer.send_and_wait(b"hello")
                async with client.consumer(stream, "s") as consumer:
                    (got,) = await consumer.receive_batch(max_messages=1, timeout_s=30)
            assert (got.payload, got.offset) == (b"hello", sent.offset)
            log = (cluster.workdir / "logs" / "router.log").read_text(errors="replace")
            assert "discovered etcd" in log


@pytest.mark.parametrize(
    ("record", "answering", "says"),
    [
        ("_missing._tcp.tamto.test", True, "no SRV record _missing._tcp.tamto.test"),
        (RECORD, False, f"did not answer for SRV record {RECORD} within 5 s"),
    ],
)
def test_a_node_that_cannot_resolve_its_record_exits_naming_it(
    tamto_infra: Infra, tmp_path: Path, record: str, answering: bool, says: str
) -> None:
    with dns_server([]) as server:
        address = server.address
        cluster = TestCluster(tmp_path / "cluster", tamto_infra)
        if not answering:
            server.close()
        try:
            with pytest.raises(AssertionError, match="exited early"):
                cluster.start("storage", START_S, extra_env=discovery_env(record, address))
            log = (cluster.workdir / "logs" / "storage.log").read_text(errors="replace")
            (line,) = [x for x in log.splitlines() if x.startswith("tamto-storage: cannot start")]
            assert line.startswith("tamto-storage: cannot start: discovery: ")
            assert says in line
            assert cluster.processes["storage"].stop() == 1
        finally:
            cluster.stop_all()
