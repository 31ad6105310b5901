"""Wiring of the auth service: signing keys, identities, policy admin, audit, the servicer."""

from __future__ import annotations

import asyncio
import contextlib

from tamto_auth.admin import SecurityAdmin
from tamto_auth.config import AuthConfig
from tamto_auth.grpc_api import AuthServicer, add_to_server
from tamto_auth.identities import ApiKeyStore
from tamto_auth.signing import SigningKeys, load_or_create
from tamto_auth.tokens import TokenIssuer
from tamto_common.apikeys import parse_api_key
from tamto_common.audit import AuditLog
from tamto_common.policy import ALL_STREAMS, Grant, IdentityKind, Permission
from tamto_common.service import Runtime
from tamto_common.startup import until_reachable


async def setup(config: AuthConfig, runtime: Runtime) -> None:
    """Load (or create) the signing keys, ensure the development identity, serve the Auth API.

    The development key's subject becomes a service identity bound to
    `--dev-role`, a role granting admin on `*` (created if missing).
    """
    keys = load_or_create(config.signing_keys_dir)
    identities = ApiKeyStore(runtime.etcd)
    audit = AuditLog("auth", config.audit_path, runtime.bus)
    runtime.resources.push_async_callback(audit.close)
    issuer = TokenIssuer(keys, config.issuer, config.audience, config.token_ttl_s)
    servicer: AuthServicer | None = None

    def use(new_keys: SigningKeys) -> None:
        assert servicer is not None
        servicer.use_signing_keys(new_keys)

    admin = SecurityAdmin(
        runtime.etcd,
        identities,
        runtime.bus,
        audit,
        config.signing_keys_dir,
        config.signing_key_retain_s,
        use,
    )
    servicer = AuthServicer(identities, issuer, keys, admin, audit)
    if config.dev_api_key:

        async def ensure_dev_identity() -> None:
            # The config check already validated the format.
            await identities.ensure_key(parse_api_key(config.dev_api_key), config.dev_subject)
            await admin.ensure_identity(config.dev_subject, IdentityKind.SERVICE)
            await admin.ensure_role(config.dev_role, (Grant(Permission.ADMIN, ALL_STREAMS),))
            await admin.bind(None, config.dev_subject, config.dev_role)

        # Idempotent, so retried while etcd is down or paused: auth serves as soon as it answers.
        await until_reachable("etcd to ensure the development identity", ensure_dev_identity)
    add_to_server(servicer, runtime.server)

    rotation = asyncio.create_task(
        admin.rotate_signing_keys_every(config.signing_key_max_age_s), name="signing-key-rotation"
    )

    async def stop_rotation() -> None:
        rotation.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await rotation

    runtime.resources.push_async_callback(stop_rotation)
