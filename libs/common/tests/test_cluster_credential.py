"""The cluster credential against a real etcd: the first node with a secret records
its hash; later nodes join only with the same secret (each test uses its own key)."""

from __future__ import annotations

import uuid

import aetcd
import pytest

from tamto_common.cluster_credential import (
    CredentialRecord,
    CredentialRefused,
    admit,
    new_cluster_secret,
)


def own_key() -> str:
    return f"/tamto-test/credential/{uuid.uuid4().hex}"


async def test_the_first_secret_is_recorded_as_a_hash_and_then_required(
    etcd_client: aetcd.Client,
) -> None:
    key, secret = own_key(), new_cluster_secret()
    await admit(etcd_client, secret, key)
    stored = await etcd_client.get(key.encode())
    assert stored is not None
    assert secret.encode() not in stored.value
    assert CredentialRecord.from_json(stored.value, key).matches(secret)

    await admit(etcd_client, secret, key)  # the same secret joins again
    with pytest.raises(CredentialRefused, match="requires one and this node has none"):
        await admit(etcd_client, "", key)
    with pytest.raises(CredentialRefused, match="does not match the cluster's"):
        await admit(etcd_client, new_cluster_secret(), key)
    after = await etcd_client.get(key.encode())
    assert after is not None
    assert after.value == stored.value, "a refused node changed nothing"


async def test_a_cluster_without_a_credential_is_open(etcd_client: aetcd.Client) -> None:
    key = own_key()
    await admit(etcd_client, "", key)
    assert await etcd_client.get(key.encode()) is None
