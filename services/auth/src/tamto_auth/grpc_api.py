"""The gRPC adapter of the auth service: the only module that sees protobuf types."""

from __future__ import annotations

import grpc
import structlog

from tamto_auth.identities import ApiKeyStore
from tamto_auth.signing import SigningKeys
from tamto_auth.tokens import TokenIssuer
from tamto_common.apikeys import parse_api_key
from tamto_common.errors import Unauthenticated
from tamto_protocol.v1 import auth_pb2, auth_pb2_grpc

log = structlog.get_logger(__name__)


class AuthServicer(auth_pb2_grpc.AuthServicer):  # type: ignore[misc]
    """Authenticate (API key -> token) and GetJwks. Errors are TamtoErrors, translated by
    `TranslateErrorsInterceptor`."""

    def __init__(self, identities: ApiKeyStore, issuer: TokenIssuer, keys: SigningKeys) -> None:
        self._identities = identities
        self._issuer = issuer
        self._keys = keys

    async def Authenticate(
        self, request: auth_pb2.AuthRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.AuthResponse:
        api_key = parse_api_key(request.api_key)
        try:
            subject = await self._identities.verify(api_key)
        except Unauthenticated:
            # The key id is public; the secret never reaches a log.
            log.info("authentication refused", key_id=api_key.key_id)
            raise
        issued = self._issuer.issue(subject)
        log.info("authenticated", key_id=api_key.key_id, subject=subject)
        return auth_pb2.AuthResponse(
            token=issued.token, expires_at_unix=issued.expires_at, subject=issued.subject
        )

    async def GetJwks(
        self, request: auth_pb2.GetJwksRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.GetJwksResponse:
        return auth_pb2.GetJwksResponse(jwks_json=self._keys.jwks())


def add_to_server(servicer: AuthServicer, server: grpc.aio.Server) -> None:
    """Register the servicer on a server."""
    auth_pb2_grpc.add_AuthServicer_to_server(servicer, server)
