"""The Gateway's security admin RPCs: authorize (admin on `*`), then forward to auth.

A gRPC adapter module: requests and responses are the auth contract's own
messages, passed through unchanged. The caller's subject and address travel as
`x-tamto-actor` / `x-tamto-source` metadata for auth's audit log.

A change answers only once this gateway's policy cache holds it: the admin who
bound a role and then calls with that role on the same gateway is not refused
for the few milliseconds the bus event takes. Other gateways and routers follow
within milliseconds of the event (within `refresh_s` if it is lost).
"""

from __future__ import annotations

from typing import Any

import grpc

from tamto_common.channels import ChannelPool
from tamto_common.grpc_errors import downstream_error
from tamto_common.lists import check_count
from tamto_common.tokens import Principal
from tamto_gateway.guarded import Guarded
from tamto_gateway.routing import Routes
from tamto_protocol.limits import MAX_GRANTS_PER_ROLE
from tamto_protocol.v1 import auth_pb2, auth_pb2_grpc, gateway_pb2

ACTOR_HEADER = "x-tamto-actor"
SOURCE_HEADER = "x-tamto-source"


class AuthForwarder:
    """Calls the auth service on behalf of a client (errors come back as TamtoErrors)."""

    def __init__(self, routes: Routes, channels: ChannelPool, timeout_s: float) -> None:
        self._routes = routes
        self._channels = channels
        self._timeout = timeout_s

    async def call(self, method: str, request: Any, actor: str, source: str) -> Any:
        """Invoke `Auth/<method>` with the actor and source as metadata."""
        stub = auth_pb2_grpc.AuthStub(self._channels.get(await self._routes.auth_address()))
        try:
            return await getattr(stub, method)(
                request,
                timeout=self._timeout,
                metadata=((ACTOR_HEADER, actor), (SOURCE_HEADER, source)),
            )
        except grpc.aio.AioRpcError as exc:
            raise downstream_error(exc, "auth") from exc


class SecurityApi(Guarded):
    """Mixed into the Gateway servicer: the admin RPCs and WhoAmI."""

    _auth: AuthForwarder

    async def _admin_call(
        self, method: str, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        principal = await self._security_admin(context, method)
        source = context.peer() or "unknown"
        response = await self._auth.call(method, request, principal.subject, source)
        if not method.startswith("List"):
            await self._guard.catch_up()
        return response

    async def CreateIdentity(
        self, request: auth_pb2.CreateIdentityRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("CreateIdentity", request, context)

    async def ListIdentities(
        self, request: auth_pb2.ListIdentitiesRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("ListIdentities", request, context)

    async def SetIdentityDisabled(
        self, request: auth_pb2.SetIdentityDisabledRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("SetIdentityDisabled", request, context)

    async def CreateApiKey(
        self, request: auth_pb2.CreateApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("CreateApiKey", request, context)

    async def SetApiKeyDisabled(
        self, request: auth_pb2.SetApiKeyDisabledRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("SetApiKeyDisabled", request, context)

    async def RotateApiKey(
        self, request: auth_pb2.RotateApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("RotateApiKey", request, context)

    async def DeleteApiKey(
        self, request: auth_pb2.DeleteApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("DeleteApiKey", request, context)

    async def PutRole(
        self, request: auth_pb2.PutRoleRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        check_count("role.grants", len(request.role.grants), MAX_GRANTS_PER_ROLE)
        return await self._admin_call("PutRole", request, context)

    async def DeleteRole(
        self, request: auth_pb2.DeleteRoleRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("DeleteRole", request, context)

    async def ListRoles(
        self, request: auth_pb2.ListRolesRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("ListRoles", request, context)

    async def BindRole(
        self, request: auth_pb2.BindRoleRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("BindRole", request, context)

    async def UnbindRole(
        self, request: auth_pb2.BindRoleRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("UnbindRole", request, context)

    async def ListBindings(
        self, request: auth_pb2.ListBindingsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("ListBindings", request, context)

    async def RotateSigningKey(
        self, request: auth_pb2.RotateSigningKeyRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._admin_call("RotateSigningKey", request, context)

    async def WhoAmI(
        self, request: gateway_pb2.WhoAmIRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.WhoAmIResponse:
        source = context.peer() or "unknown"
        principal: Principal = await self._guard.principal(
            context.invocation_metadata(), source, "WhoAmI"
        )
        policy = self._guard.policy
        return gateway_pb2.WhoAmIResponse(
            subject=principal.subject,
            expires_at_unix=int(principal.expires_at),
            roles=list(policy.roles_of(principal.subject)),
            grants=[
                auth_pb2.Grant(permission=g.permission.value, pattern=g.pattern)
                for g in policy.grants_of(principal.subject)
            ],
        )
