"""Wiring of the auth service: signing keys, identities, the gRPC servicer."""

from __future__ import annotations

from tamto_auth.config import AuthConfig
from tamto_auth.grpc_api import AuthServicer, add_to_server
from tamto_auth.identities import ApiKeyStore
from tamto_auth.signing import load_or_create
from tamto_auth.tokens import TokenIssuer
from tamto_common.apikeys import parse_api_key
from tamto_common.service import Runtime


async def setup(config: AuthConfig, runtime: Runtime) -> None:
    """Load (or create) the signing keys, ensure the development key, serve the Auth API."""
    keys = load_or_create(config.signing_keys_dir)
    identities = ApiKeyStore(runtime.etcd)
    if config.dev_api_key:
        # The config check already validated the format.
        await identities.ensure_key(parse_api_key(config.dev_api_key), config.dev_subject)
    issuer = TokenIssuer(keys, config.issuer, config.audience, config.token_ttl_s)
    add_to_server(AuthServicer(identities, issuer, keys), runtime.server)
