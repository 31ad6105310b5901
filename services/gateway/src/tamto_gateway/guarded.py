"""What every part of the Gateway servicer asks before it acts, defined once.

Who calls (`_principal`), whether they may act on a stream (`_authorize`) or across
the cluster (`_security_admin`), and the audit record of an administrative act
(`_audit_admin`). `GatewayServicer` and its parts (`*_api.py`) inherit it; each
holds the `Guard` the gateway's setup gives the servicer.
"""

from __future__ import annotations

import grpc

from tamto_common.audit import ADMIN
from tamto_common.guard import Guard
from tamto_common.policy import Permission
from tamto_common.tokens import Principal


class Guarded:
    """Authentication, authorization and the admin audit of the servicer's calls."""

    _guard: Guard

    async def _principal(self, context: grpc.aio.ServicerContext, action: str) -> Principal:
        return await self._guard.principal(
            context.invocation_metadata(), context.peer() or "unknown", action
        )

    async def _authorize(
        self,
        context: grpc.aio.ServicerContext,
        permission: Permission | None,
        stream: str,
        action: str,
    ) -> Principal:
        """Authenticate the call, then require `permission` (None: any) on `stream`."""
        principal = await self._principal(context, action)
        source = context.peer() or "unknown"
        if permission is None:
            await self._guard.require_any(principal, stream, source, action)
        else:
            await self._guard.require(principal, permission, stream, source, action)
        return principal

    async def _security_admin(self, context: grpc.aio.ServicerContext, action: str) -> Principal:
        """Authenticate the call, then require `admin` on every stream (``*``)."""
        source = context.peer() or "unknown"
        principal = await self._guard.principal(context.invocation_metadata(), source, action)
        await self._guard.require_security_admin(principal, source, action)
        return principal

    async def _audit_admin(
        self, context: grpc.aio.ServicerContext, principal: Principal, action: str, target: str
    ) -> None:
        await self._guard.audit.record(
            ADMIN,
            actor=principal.subject,
            action=action,
            target=target,
            outcome="ok",
            source=context.peer() or "unknown",
        )
