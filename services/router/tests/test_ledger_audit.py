"""The ledger auditor opens the owned, idle partitions whose ledgers name a storage
node that stays unregistered, a few per round, and counts them for the gauge
(`tamto_router.ledger_audit`; docs/cluster.md section 2, "Re-replication")."""

from __future__ import annotations

import uuid

import aetcd
import pytest

from tamto_common.config import load_config
from tamto_common.errors import ConfigError
from tamto_common.ledgers import open_ledger
from tamto_router.config import RouterConfig
from tamto_router.ledger_audit import AUDIT_INTERVAL_S, LedgerAudit, audit_interval_s
from tamto_router.replica_catch_up import REREPLICATE_AFTER_S


async def test_owned_idle_partitions_with_a_replica_down_are_opened_a_few_per_round(
    etcd_client: aetcd.Client,
) -> None:
    stream = f"audit-{uuid.uuid4().hex[:8]}"
    for p in range(4):
        await open_ledger(etcd_client, stream, p, 1, ("a", "b", "d"), 2, 0)
    await open_ledger(etcd_client, stream, 4, 1, ("b",), 1, 0)  # R = 1: nothing to copy from
    await open_ledger(etcd_client, stream, 5, 1, ("a", "c"), 1, 0)  # every replica is up
    # R = 2, Q = 1, open: its end cannot be recovered without "b" (it may hold an
    # acked entry alone): counted, never opened.
    await open_ledger(etcd_client, stream, 6, 1, ("a", "b"), 1, 0)
    opened: list[tuple[str, int]] = []

    async def open_partition(s: str, p: int) -> object:
        opened.append((s, p))
        return None

    def make(after_s: float) -> LedgerAudit:
        return LedgerAudit(
            etcd_client,
            owns=lambda s, p: s == stream and p != 3,  # partition 3 is another router's
            registered=lambda: {"a", "c", "d"},
            is_open=lambda s, p: p == 2 or (s, p) in opened,  # its log repairs, counts it
            open_partition=open_partition,
            after_s=after_s,
            per_round=1,
        )

    patient = make(after_s=3600.0)
    assert await patient.audit_once() == []
    assert patient.idle_under_replicated == {(stream, 0), (stream, 1), (stream, 6)}

    audit = make(after_s=0.0)
    assert await audit.audit_once() == [(stream, 0)]
    assert audit.idle_under_replicated == {(stream, 0), (stream, 1), (stream, 6)}
    assert await audit.audit_once() == [(stream, 1)]
    assert audit.idle_under_replicated == {(stream, 1), (stream, 6)}
    assert await audit.audit_once() == []
    assert audit.idle_under_replicated == {(stream, 6)}
    assert opened == [(stream, 0), (stream, 1)]


def test_a_shorter_rereplication_delay_shortens_the_audit_period() -> None:
    """TAMTO_ROUTER_REREPLICATE_AFTER_S reaches the router's config, and the auditor
    reads the ledgers at least twice within it (seen down, then opened)."""
    config = load_config(RouterConfig, "router", environ={"TAMTO_ROUTER_REREPLICATE_AFTER_S": "2"})
    assert config.rereplicate_after_s == 2.0
    assert audit_interval_s(config.rereplicate_after_s) == 1.0
    assert RouterConfig().rereplicate_after_s == REREPLICATE_AFTER_S
    assert audit_interval_s(REREPLICATE_AFTER_S) == AUDIT_INTERVAL_S
    with pytest.raises(ConfigError):
        load_config(RouterConfig, "router", environ={"TAMTO_ROUTER_REREPLICATE_AFTER_S": "0"})
