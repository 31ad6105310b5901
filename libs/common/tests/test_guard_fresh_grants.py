"""A grant made before a token was minted is in force for it on a service whose policy
snapshot is older, even when the bus event announcing the grant never arrives; a
token older than the snapshot is refused from the snapshot, without reading etcd.

Found when `tamto up` started its services forked, all within milliseconds: a router
loaded the policy before auth had bound the development identity, and refused its
first publish. Here the cache has no bus and an hour's refresh, so only the read
before a refusal can bring the grant in.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

from tamto_common import policy
from tamto_common.audit import AuditLog
from tamto_common.config import parse_endpoints
from tamto_common.errors import PermissionDenied
from tamto_common.guard import Guard, PolicyCache
from tamto_common.membership import connect_etcd
from tamto_common.policy import Grant, Permission, Role
from tamto_common.tokens import Principal
from tamto_testing.infra import Infra


async def test_a_grant_older_than_the_token_is_found_before_refusing(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    etcd = await connect_etcd(parse_endpoints(tamto_infra.etcd_endpoint))
    cache = PolicyCache(etcd, bus=None, refresh_s=3600)
    audit = AuditLog("test", tmp_path / "audit.jsonl", bus=None)
    role, subject, stream = f"writer-{uuid.uuid4().hex[:8]}", "corp:fresh-alice", "fresh-orders"
    try:
        await cache.start()
        guard = Guard(cast(Any, None), cache, audit)  # callers here are verified already
        old_token = Principal(subject, expires_at=time.time() + 60, issued_at=time.time() - 60)
        await etcd.put(
            policy.role_key(role), Role(role, (Grant(Permission.PUBLISH, stream),)).to_json()
        )
        await etcd.put(policy.binding_key(role, subject), policy.binding_value(role, subject))
        assert not cache.policy.allows(subject, Permission.PUBLISH, stream), "no event, no reload"

        # Minted before the snapshot was read: refused from the snapshot, no etcd read.
        with pytest.raises(PermissionDenied, match="lacks permission publish"):
            await guard.require(old_token, Permission.PUBLISH, stream, "test", "Publish")
        assert not cache.policy.allows(subject, Permission.PUBLISH, stream)

        # Minted after the grant: the snapshot is read again, and the call passes.
        new_token = Principal(subject, expires_at=time.time() + 60, issued_at=time.time())
        await guard.require(new_token, Permission.PUBLISH, stream, "test", "Publish")
        assert cache.policy.allows(subject, Permission.PUBLISH, stream)
        # What the grant does not cover is still refused.
        with pytest.raises(PermissionDenied, match="lacks permission consume"):
            await guard.require(new_token, Permission.CONSUME, stream, "test", "Consume")
    finally:
        await cache.stop()
        await audit.close()
        await etcd.delete(policy.role_key(role))
        await etcd.delete(policy.binding_key(role, subject))
        await etcd.close()
