"""A security change made through a gateway is in force on that gateway when
the call answers (read-your-writes for the admin who made it).

Without it, binding a role and then calling with it on the same gateway raced
the bus event that reloads the gateway's policy cache: a loaded CI machine saw
WhoAmI answer with no roles right after the binding. Here the cache has no bus
and an hour's refresh, so only the read after the change can bring it in.
The auth service is stood in for by a forwarder that writes the binding to the
real etcd as auth does.
"""

from __future__ import annotations

from typing import Any, cast

from tamto_common import policy
from tamto_common.config import parse_endpoints
from tamto_common.guard import Guard, PolicyCache
from tamto_common.membership import connect_etcd
from tamto_common.tokens import Principal
from tamto_gateway.security_api import SecurityApi
from tamto_protocol.v1 import auth_pb2
from tamto_testing.infra import Infra


class TrustingGuard(Guard):
    """Every caller is a security admin; the policy cache is the real one."""

    async def principal(self, metadata: object, source: str, action: str) -> Principal:
        return Principal("admin", expires_at=0.0)

    async def require_security_admin(self, principal: Principal, source: str, action: str) -> None:
        return None


class EtcdAuth:
    """Writes a binding to etcd as the auth service does, and announces nothing."""

    def __init__(self, etcd: Any) -> None:
        self._etcd = etcd
        self.calls: list[str] = []

    async def call(self, method: str, request: Any, actor: str, source: str) -> Any:
        self.calls.append(method)
        if method == "BindRole":
            await self._etcd.put(
                policy.binding_key(request.role, request.subject),
                policy.binding_value(request.role, request.subject),
            )
        return auth_pb2.BindRoleResponse()


class Context:
    def invocation_metadata(self) -> tuple[()]:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


class Api(SecurityApi):
    def __init__(self, guard: Guard, auth: EtcdAuth) -> None:
        self._guard = guard
        self._auth = cast(Any, auth)


async def test_a_binding_is_in_force_on_the_gateway_when_the_call_answers(
    tamto_infra: Infra,
) -> None:
    etcd = await connect_etcd(parse_endpoints(tamto_infra.etcd_endpoint))
    cache = PolicyCache(etcd, bus=None, refresh_s=3600)
    role, subject = "ryw-role", "corp:ryw-alice"
    try:
        await etcd.put(policy.role_key(role), policy.Role(role, ()).to_json())
        await cache.start()
        api = Api(TrustingGuard(cast(Any, None), cache, cast(Any, None)), EtcdAuth(etcd))
        context = cast(Any, Context())
        assert cache.policy.roles_of(subject) == ()

        await api.BindRole(auth_pb2.BindRoleRequest(role=role, subject=subject), context)
        assert cache.policy.roles_of(subject) == (role,)

        listed_with = cache.policy
        await api.ListBindings(auth_pb2.ListBindingsRequest(), context)
        assert cache.policy is listed_with, "a read-only call does not re-read the policy"
    finally:
        await cache.stop()
        await etcd.delete(policy.binding_key(role, subject))
        await etcd.delete(policy.role_key(role))
        await etcd.close()
