"""Partition ownership through etcd, with an epoch that grows on every claim.

`/tamto/owners/<stream>/<partition>` holds `{"owner": <instance>, "epoch": N}`
bound to the router's lease, so it vanishes when the router dies.
`/tamto/epochs/<stream>/<partition>` holds the last epoch ever issued and is
never deleted while the stream exists, so epochs only grow (a deleted stream's
go once its grace period has passed: `tamto_common.deletions`). A claim is one etcd transaction: it
succeeds only if nobody holds the owner key (or this same instance holds it
from before a crash) and the epoch counter did not move meanwhile. Storage
refuses writes from older epochs, which fences a router that lost its claim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aetcd

from tamto_common.deletions import EPOCHS as EPOCHS_PREFIX
from tamto_common.placement import OWNERS_PREFIX

OWNERS = OWNERS_PREFIX  # one definition: `tamto_common.placement`
EPOCHS = EPOCHS_PREFIX  # one definition: `tamto_common.deletions`


@dataclass(frozen=True)
class Claim:
    stream: str
    partition: int
    epoch: int


@dataclass(frozen=True)
class Held:
    """Someone else holds the partition."""

    owner: str
    epoch: int


async def claim_partition(
    etcd: aetcd.Client, lease: Any, instance: str, stream: str, partition: int
) -> Claim | Held:
    """Try to become the owner of a partition; returns the claim or the current holder."""
    owner_key = f"{OWNERS}{stream}/{partition}".encode()
    epoch_key = f"{EPOCHS}{stream}/{partition}".encode()
    current = await etcd.get(owner_key)
    if current is not None:
        holder = json.loads(current.value)
        if holder["owner"] != instance:
            return Held(holder["owner"], int(holder["epoch"]))
    epoch_kv = await etcd.get(epoch_key)
    last_epoch = int(epoch_kv.value) if epoch_kv is not None else 0
    epoch = last_epoch + 1
    tx = etcd.transactions
    compare = [
        tx.mod(epoch_key) == (epoch_kv.mod_revision if epoch_kv is not None else 0),
        tx.mod(owner_key) == (current.mod_revision if current is not None else 0),
    ]
    value = json.dumps({"owner": instance, "epoch": epoch}).encode()
    ok, _ = await etcd.transaction(
        compare=compare,
        success=[tx.put(epoch_key, str(epoch).encode()), tx.put(owner_key, value, lease=lease)],
        failure=[],
    )
    if not ok:
        again = await etcd.get(owner_key)
        if again is None:
            return Held("(contended)", epoch)
        holder = json.loads(again.value)
        return Held(holder["owner"], int(holder["epoch"]))
    return Claim(stream, partition, epoch)


async def still_held(etcd: aetcd.Client, instance: str, claim: Claim) -> bool:
    """Whether `instance` still holds `claim` in etcd (same epoch, nobody claimed since)."""
    current = await etcd.get(f"{OWNERS}{claim.stream}/{claim.partition}".encode())
    if current is None:
        return False
    holder = json.loads(current.value)
    return bool(holder["owner"] == instance and int(holder["epoch"]) == claim.epoch)


async def release_partition(etcd: aetcd.Client, claim: Claim) -> None:
    """Give a partition up (graceful shutdown) if we still hold this epoch."""
    owner_key = f"{OWNERS}{claim.stream}/{claim.partition}".encode()
    current = await etcd.get(owner_key)
    if current is not None and json.loads(current.value)["epoch"] == claim.epoch:
        await etcd.delete(owner_key)
