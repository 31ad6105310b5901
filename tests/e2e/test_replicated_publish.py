"""Replicated publishing on a three-node cluster (issue 21 Deliver 3; docs/cluster.md
sections 2-3): a stream with R = 3 and Q = 2 keeps every acknowledged message when
one storage node is killed (kill -9) during publishing and then a router (its
successor recovers the open ledger from a quorum), and refuses publishes with
UNAVAILABLE ("no quorum") once a second one is killed, instead of acknowledging
what is held once.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import aetcd
import pytest

import tamto_sdk
from tamto_common.ledgers import read_ledgers
from tamto_router.ownership import OWNERS
from tamto_sdk import ClientOptions, StreamConfig
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra

from .traffic import consume_all

pytestmark = pytest.mark.e2e

PARTITIONS = 4
ROUNDS = 6
PER_ROUND = 50


async def publish_round(
    producer: tamto_sdk.Producer,
    prefix: str,
    count: int,
    acked: list[bytes],
    halfway: Callable[[], None] = lambda: None,
) -> None:
    """Send `count` keyed messages with ids, calling `halfway` with half of them sent
    and none awaited; record the payloads that were acknowledged."""
    sent = []
    for i in range(count):
        if i == count // 2:
            halfway()
        payload = f"{prefix}-{i}".encode()
        key = f"k{i}".encode()  # keys spread the messages over every partition
        sent.append((payload, await producer.send(payload, key=key, id=f"{prefix}-{i}")))
    for payload, future in sent:
        try:
            await future
        except tamto_sdk.TamtoError:
            continue  # not acknowledged: it may or may not be stored
        acked.append(payload)


async def test_r3_q2_keeps_acked_messages_through_one_kill_and_refuses_after_two(
    tamto_infra: Infra, tmp_path: Path, etcd_client: aetcd.Client
) -> None:
    stream = f"replicated-{secrets.token_hex(3)}"
    cluster = TestCluster(tmp_path / "cluster", tamto_infra, nodes=3)
    ttl = cluster.shared.lease_ttl_s
    name_of = {cluster.instance_id(n): n for n in cluster.ports}
    with cluster.running():
        acked: list[bytes] = []
        async with await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            await client.streams.ensure(
                stream,
                partitions=PARTITIONS,
                config=StreamConfig(replication_factor=3, ack_quorum=2),
            )
            async with client.producer(stream) as producer:
                killed_at, victim = 0.0, ""

                def kill_first() -> None:
                    nonlocal killed_at
                    killed_at = time.monotonic()
                    cluster.kill9(victim)  # with messages of the round in flight

                for r in range(ROUNDS):
                    kill = kill_first if r == ROUNDS // 2 else (lambda: None)
                    await publish_round(producer, f"r{r}", PER_ROUND, acked, kill)
                    if r == 0:
                        # The node partition 0 is read from (its ensemble's first):
                        # reads must move to a replica that has every acked message.
                        first = (await read_ledgers(etcd_client, stream, 0)).current
                        assert first is not None
                        victim = name_of[first.ensemble[0]]
                after_kill_s = time.monotonic() - killed_at
        assert len(acked) == ROUNDS * PER_ROUND, "one storage node of three down still acks"

        # Every partition's ledger is on all three nodes, with Q = 2.
        for p in range(PARTITIONS):
            current = (await read_ledgers(etcd_client, stream, p)).current
            assert current is not None
            assert len(current.ensemble) == 3
            assert current.ack_quorum == 2

        started = time.monotonic()
        read = await consume_all(cluster, stream, "check", len(acked))
        read_s = time.monotonic() - started
        assert set(acked) <= set(read), "no acknowledged message is lost"

        # The router owning partition 0 dies (kill -9): the next owner recovers its
        # open ledger from the two live replicas, closes it there and opens the next.
        owner_kv = await etcd_client.get(f"{OWNERS}{stream}/0".encode())
        assert owner_kv is not None
        cluster.kill9(name_of[json.loads(owner_kv.value)["owner"]])
        failed_over_at = time.monotonic()
        async with await tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            async with client.producer(stream) as producer:
                await publish_round(producer, "f", PER_ROUND, acked)
        failover_s = time.monotonic() - failed_over_at
        assert len(acked) == (ROUNDS + 1) * PER_ROUND, "every publish after the failover acked"
        ledgers = (await read_ledgers(etcd_client, stream, 0)).ledgers
        assert len(ledgers) >= 2
        older, newer = ledgers[-2], ledgers[-1]
        assert older.state == "closed"
        assert older.last_offset is not None
        assert newer.first_offset == older.last_offset + 1
        assert newer.ensemble == older.ensemble
        assert newer.epoch > older.epoch
        read = await consume_all(cluster, stream, "check-after-failover", len(acked))
        assert set(acked) <= set(read), "no acknowledged message is lost across the failover"

        second = next(n for n in cluster.storages() if n != victim)
        cluster.kill9(second)
        refused_at = time.monotonic()
        short = ClientOptions(retry_deadline_s=ttl + 3.0)
        async with await tamto_sdk.connect(
            cluster.url, api_key=cluster.credential, options=short
        ) as client:
            async with client.producer(stream) as producer:
                with pytest.raises(tamto_sdk.Unavailable) as refused:
                    await (await producer.send(b"unreplicated", id="c-0"))
        assert "no quorum" in str(refused.value), refused.value
        print(
            f"\nR=3 Q=2: {len(acked)} acked, {after_kill_s:.2f}s publishing after the first "
            f"kill, read back in {read_s:.2f}s; {PER_ROUND} published across a router "
            f"kill in {failover_s:.2f}s; refused after the second storage kill in "
            f"{time.monotonic() - refused_at:.2f}s: {refused.value}"
        )
