"""The gRPC adapter of the auth service: the only module that sees protobuf types."""

from __future__ import annotations

import grpc
import structlog
from prometheus_client import Counter

from tamto_auth.admin import Caller, IdentityInfo, KeyInfo, SecurityAdmin
from tamto_auth.identities import ApiKeyStore
from tamto_auth.signing import SigningKeys
from tamto_auth.tokens import TokenIssuer
from tamto_common.apikeys import parse_api_key
from tamto_common.audit import LOGIN, AuditLog
from tamto_common.errors import InvalidArgument, Unauthenticated
from tamto_common.lists import check_count
from tamto_common.policy import Grant, IdentityKind, Role, parse_permission
from tamto_protocol.limits import MAX_GRANTS_PER_ROLE
from tamto_protocol.v1 import auth_pb2, auth_pb2_grpc

log = structlog.get_logger(__name__)

LOGINS = Counter(
    "tamto_auth_logins",
    "API key logins (Authenticate calls) by outcome: ok or refused",
    ["outcome"],
)
for _outcome in ("ok", "refused"):  # every series from the start, at 0
    LOGINS.labels(_outcome)

#: Metadata the gateway adds when it forwards a call: who asked, and from where.
ACTOR_HEADER = "x-tamto-actor"
SOURCE_HEADER = "x-tamto-source"


def caller_of(context: grpc.aio.ServicerContext) -> Caller:
    """The actor and source the gateway forwarded, or this call's own peer."""
    metadata = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
    return Caller(
        actor=metadata.get(ACTOR_HEADER, "(direct)"),
        source=metadata.get(SOURCE_HEADER, context.peer() or "unknown"),
    )


def key_pb(info: KeyInfo) -> auth_pb2.ApiKeyInfo:
    return auth_pb2.ApiKeyInfo(
        key_id=info.key_id,
        identity=info.identity,
        disabled=info.disabled,
        created_at_unix=int(info.created_at),
    )


def identity_pb(info: IdentityInfo) -> auth_pb2.Identity:
    return auth_pb2.Identity(
        name=info.record.name,
        kind=info.record.kind.value,
        disabled=info.record.disabled,
        created_at_unix=int(info.record.created_at),
        keys=[key_pb(k) for k in info.keys],
        roles=list(info.roles),
    )


def role_pb(role: Role) -> auth_pb2.Role:
    return auth_pb2.Role(
        name=role.name,
        grants=[
            auth_pb2.Grant(permission=g.permission.value, pattern=g.pattern) for g in role.grants
        ],
    )


def _kind(text: str) -> IdentityKind:
    try:
        return IdentityKind(text or IdentityKind.USER.value)
    except ValueError:
        raise InvalidArgument(f"unknown identity kind {text[:50]!r}: use user or service") from None


class AuthServicer(auth_pb2_grpc.AuthServicer):
    """Authenticate (API key -> token), GetJwks and the admin API. Errors are TamtoErrors,
    translated by `TranslateErrorsInterceptor`."""

    def __init__(
        self,
        identities: ApiKeyStore,
        issuer: TokenIssuer,
        keys: SigningKeys,
        admin: SecurityAdmin | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self._identities = identities
        self._issuer = issuer
        self._keys = keys
        self._admin = admin
        self._audit = audit

    def use_signing_keys(self, keys: SigningKeys) -> None:
        """Sign and publish with `keys` from now on (after a rotation)."""
        self._keys = keys
        self._issuer.use(keys)

    def _require_admin(self) -> SecurityAdmin:
        if self._admin is None:
            raise InvalidArgument("this auth instance has no admin API")
        return self._admin

    async def _login_audit(self, caller: Caller, outcome: str, actor: str, detail: str) -> None:
        LOGINS.labels(outcome).inc()
        if self._audit is not None:
            await self._audit.record(
                LOGIN,
                actor=actor,
                action="authenticate",
                target="api key",
                outcome=outcome,
                source=caller.source,
                detail=detail,
            )

    async def Authenticate(
        self, request: auth_pb2.AuthRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.AuthResponse:
        caller = caller_of(context)
        try:
            api_key = parse_api_key(request.api_key)
        except Unauthenticated as exc:
            await self._login_audit(caller, "refused", "(unknown)", str(exc))
            raise
        try:
            subject = await self._identities.verify(api_key)
            if self._admin is not None and await self._admin.is_disabled(subject):
                raise Unauthenticated(f"identity {subject!r} is disabled")
        except Unauthenticated as exc:
            # The key id is public; the secret never reaches a log.
            log.info("authentication refused", key_id=api_key.key_id)
            await self._login_audit(caller, "refused", "(unknown)", f"key {api_key.key_id}: {exc}")
            raise
        issued = self._issuer.issue(subject, key_id=api_key.key_id)
        log.info("authenticated", key_id=api_key.key_id, subject=subject)
        await self._login_audit(caller, "ok", subject, f"key {api_key.key_id}")
        return auth_pb2.AuthResponse(
            token=issued.token, expires_at_unix=issued.expires_at, subject=issued.subject
        )

    async def GetJwks(
        self, request: auth_pb2.GetJwksRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.GetJwksResponse:
        return auth_pb2.GetJwksResponse(jwks_json=self._keys.jwks())

    async def CreateIdentity(
        self, request: auth_pb2.CreateIdentityRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.Identity:
        admin = self._require_admin()
        info = await admin.create_identity(caller_of(context), request.name, _kind(request.kind))
        return identity_pb(info)

    async def ListIdentities(
        self, request: auth_pb2.ListIdentitiesRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.ListIdentitiesResponse:
        identities = await self._require_admin().list_identities()
        return auth_pb2.ListIdentitiesResponse(identities=[identity_pb(i) for i in identities])

    async def SetIdentityDisabled(
        self, request: auth_pb2.SetIdentityDisabledRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.Identity:
        info = await self._require_admin().set_identity_disabled(
            caller_of(context), request.name, request.disabled
        )
        return identity_pb(info)

    async def CreateApiKey(
        self, request: auth_pb2.CreateApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.ApiKeyCreated:
        key, info = await self._require_admin().create_api_key(caller_of(context), request.identity)
        return auth_pb2.ApiKeyCreated(info=key_pb(info), api_key=str(key))

    async def SetApiKeyDisabled(
        self, request: auth_pb2.SetApiKeyDisabledRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.ApiKeyInfo:
        info = await self._require_admin().set_api_key_disabled(
            caller_of(context), request.key_id, request.disabled
        )
        return key_pb(info)

    async def RotateApiKey(
        self, request: auth_pb2.RotateApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.ApiKeyCreated:
        key, info = await self._require_admin().rotate_api_key(caller_of(context), request.key_id)
        return auth_pb2.ApiKeyCreated(info=key_pb(info), api_key=str(key))

    async def DeleteApiKey(
        self, request: auth_pb2.DeleteApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.DeleteApiKeyResponse:
        info = await self._require_admin().delete_api_key(caller_of(context), request.key_id)
        return auth_pb2.DeleteApiKeyResponse(info=key_pb(info))

    async def PutRole(
        self, request: auth_pb2.PutRoleRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.Role:
        check_count("role.grants", len(request.role.grants), MAX_GRANTS_PER_ROLE)
        grants = tuple(
            Grant(parse_permission(g.permission), g.pattern) for g in request.role.grants
        )
        role = await self._require_admin().put_role(caller_of(context), request.role.name, grants)
        return role_pb(role)

    async def DeleteRole(
        self, request: auth_pb2.DeleteRoleRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.DeleteRoleResponse:
        deleted = await self._require_admin().delete_role(caller_of(context), request.name)
        return auth_pb2.DeleteRoleResponse(deleted=deleted)

    async def ListRoles(
        self, request: auth_pb2.ListRolesRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.ListRolesResponse:
        roles = await self._require_admin().list_roles()
        return auth_pb2.ListRolesResponse(roles=[role_pb(r) for r in roles])

    async def BindRole(
        self, request: auth_pb2.BindRoleRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.BindRoleResponse:
        changed = await self._require_admin().bind(
            caller_of(context), request.subject, request.role
        )
        return auth_pb2.BindRoleResponse(changed=changed)

    async def UnbindRole(
        self, request: auth_pb2.BindRoleRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.BindRoleResponse:
        changed = await self._require_admin().unbind(
            caller_of(context), request.subject, request.role
        )
        return auth_pb2.BindRoleResponse(changed=changed)

    async def ListBindings(
        self, request: auth_pb2.ListBindingsRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.ListBindingsResponse:
        bindings = await self._require_admin().list_bindings()
        return auth_pb2.ListBindingsResponse(
            bindings=[auth_pb2.Binding(subject=s, roles=r) for s, r in bindings.items()]
        )

    async def RotateSigningKey(
        self, request: auth_pb2.RotateSigningKeyRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.RotateSigningKeyResponse:
        keys = await self._require_admin().rotate_signing_key(caller_of(context))
        return auth_pb2.RotateSigningKeyResponse(
            current_kid=keys.current.kid, kids=[k.kid for k in keys.keys]
        )


def add_to_server(servicer: AuthServicer, server: grpc.aio.Server) -> None:
    """Register the servicer on a server."""
    auth_pb2_grpc.add_AuthServicer_to_server(servicer, server)
