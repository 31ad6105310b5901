"""The harness's infrastructure fixtures start real, reachable etcd and NATS."""

from __future__ import annotations

import nats

from tamto_common.config import parse_endpoints
from tamto_common.membership import connect_etcd


async def test_etcd_is_real_and_stores_keys(etcd_endpoint: str) -> None:
    client = await connect_etcd(parse_endpoints(etcd_endpoint))
    try:
        await client.put(b"/tamto/test/harness", b"ok")
        got = await client.get(b"/tamto/test/harness")
        assert got is not None
        assert got.value == b"ok"
    finally:
        await client.close()


async def test_nats_is_real_and_routes_messages(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        sub = await nc.subscribe("tamto.test.harness")
        await nc.publish("tamto.test.harness", b"hello")
        msg = await sub.next_msg(timeout=5)
        assert msg.data == b"hello"
    finally:
        await nc.close()
