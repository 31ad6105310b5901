"""The cluster credential: a node joins only with the cluster's shared secret.

Joining: a storage node, router, gateway or auth service
started with another cluster's secret, a wrong one, or none, must not join.
The model is NATS's cluster route authorization and Consul's gossip key, one
secret per cluster that every node is given (`--cluster-secret`, usually as
`TAMTO_CLUSTER_SECRET` from a secret store), rather than Kafka's per-broker
SASL users: Tamto's nodes already share etcd as their one source of truth, so
the secret is checked against what etcd holds. etcd keeps only a salted scrypt
hash of it, at `/tamto/cluster/credential`, so reading etcd does not give the
secret away.

At start-up, after reaching etcd and before it serves or registers, a node:
- with no credential recorded in etcd and a secret: records the secret's hash
  (one create-if-absent transaction; the first node of a cluster sets it, as
  etcd's initial cluster token is set by its first members) and joins;
- with no credential recorded and no secret: joins an open cluster, as before
  this existed, with a warning;
- with a credential recorded: joins only if its secret matches, and otherwise
  stops with `CredentialRefused` naming the setting (exit code 3, one line).

What it does not do: it keeps out nodes that were misconfigured or pointed at
the wrong cluster, not an attacker who can write to etcd (who could replace
the hash); protecting etcd itself (its own auth and TLS) is what does that.
Peers do not check each other's calls against the credential; mutual TLS
(`--tls-*`) is what authenticates the callers of a node's gRPC port.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import asdict, dataclass
from typing import Any

import aetcd
import structlog

from tamto_common.errors import DataLoss, PermissionDenied

CREDENTIAL_KEY = "/tamto/cluster/credential"
#: The setting a node's secret comes from, named in every refusal.
SETTING = "--cluster-secret / TAMTO_CLUSTER_SECRET"
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
log = structlog.get_logger(__name__)


class CredentialRefused(PermissionDenied):
    """This node's cluster secret is missing or does not match the cluster's."""


def new_cluster_secret() -> str:
    """A fresh cluster secret (256 random bits), for `tamto up` or an operator."""
    return f"tcs_{secrets.token_urlsafe(32)}"


@dataclass(frozen=True, slots=True)
class CredentialRecord:
    """What etcd holds: the secret's salted scrypt hash and the scrypt parameters."""

    salt: str
    hash: str
    n: int = SCRYPT_N
    r: int = SCRYPT_R
    p: int = SCRYPT_P

    @classmethod
    def for_secret(cls, secret: str) -> CredentialRecord:
        salt = secrets.token_bytes(16)
        digest = _scrypt(secret, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
        return cls(base64.b64encode(salt).decode(), base64.b64encode(digest).decode())

    def matches(self, secret: str) -> bool:
        digest = _scrypt(secret, base64.b64decode(self.salt), self.n, self.r, self.p)
        return hmac.compare_digest(digest, base64.b64decode(self.hash))

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, key: str) -> CredentialRecord:
        try:
            fields: dict[str, Any] = json.loads(data)
            return cls(**fields)
        except (ValueError, TypeError) as exc:
            raise DataLoss(f"unreadable cluster credential record {key}: {exc}") from None


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, n=n, r=r, p=p, maxmem=2 * 128 * r * n)


async def admit(etcd: aetcd.Client, secret: str, key: str = CREDENTIAL_KEY) -> None:
    """Check this node's `secret` against the cluster's credential (see the module doc).

    Raises `CredentialRefused` when the cluster has a credential and `secret` is
    empty or does not match it.
    """
    got = await etcd.get(key.encode())
    if got is None:
        if not secret:
            log.warning(
                f"the cluster has no credential: any node may join (set {SETTING} on every node)"
            )
            return
        record = await asyncio.to_thread(CredentialRecord.for_secret, secret)
        tx = etcd.transactions
        created, _ = await etcd.transaction(
            compare=[tx.version(key.encode()) == 0],
            success=[tx.put(key.encode(), record.to_json())],
            failure=[],
        )
        if created:
            log.info("recorded the cluster credential: nodes now join only with it", key=key)
            return
        got = await etcd.get(key.encode())  # another node set it meanwhile
        assert got is not None, f"{key} was created and is gone"
    record = CredentialRecord.from_json(got.value, key)
    if not secret:
        raise CredentialRefused(
            f"cluster credential: this cluster requires one and this node has none "
            f"(set {SETTING}; etcd holds its hash at {key})"
        )
    if not await asyncio.to_thread(record.matches, secret):
        raise CredentialRefused(
            f"cluster credential: {SETTING} does not match the cluster's (hash at {key}): "
            "a wrong secret, or another cluster's"
        )
