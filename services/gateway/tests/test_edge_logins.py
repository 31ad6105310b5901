"""The edge ports' API key logins: a crowd with one key makes one login to auth."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from tamto_gateway.http.auth import Credentials
from tamto_protocol.v1 import gateway_pb2


class CountingServicer:
    def __init__(self) -> None:
        self.logins = 0

    async def Authenticate(
        self, request: gateway_pb2.AuthenticateRequest, _: Any
    ) -> gateway_pb2.AuthenticateResponse:
        self.logins += 1
        await asyncio.sleep(0.05)  # auth's answer takes a while: the others arrive meanwhile
        return gateway_pb2.AuthenticateResponse(
            token=f"token-of-{request.api_key}", expires_at_unix=int(time.time()) + 3600
        )


async def test_a_crowd_with_one_key_logs_in_once() -> None:
    servicer = CountingServicer()
    credentials = Credentials(cast(Any, servicer))
    calls = await asyncio.gather(
        *(credentials.call({"x-api-key": "k1"}, f"mqtt:h:{i}") for i in range(200)),
        credentials.call({"x-api-key": "k2"}, "mqtt:h:0"),
    )
    assert servicer.logins == 2
    assert {c.invocation_metadata() for c in calls} == {
        (("authorization", "Bearer token-of-k1"),),
        (("authorization", "Bearer token-of-k2"),),
    }
