"""`TranslateErrorsInterceptor` on a real grpc.aio server: every call is timed
and its errors translated, and a method's wrapped handler is made once, not per
call (a crowd of 10,000 consumer streams paid that per stream)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tamto_common import grpc_errors
from tamto_common.errors import NotFound
from tamto_common.grpc_errors import RPC_SECONDS, TranslateErrorsInterceptor

METHOD = "/tamto.test.Echo/Echo"


def count(code: str) -> float:
    """How many calls of METHOD ended with `code` so far."""
    return float(
        sum(
            s.value
            for metric in RPC_SECONDS.collect()
            for s in metric.samples
            if s.name.endswith("_count") and s.labels == {"method": METHOD, "code": code}
        )
    )


async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    if request == b"missing":
        raise NotFound("no such thing")
    return request


async def test_calls_are_timed_and_translated_with_one_wrapped_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wraps: list[str] = []
    real_wrap = grpc_errors._wrap

    def counting_wrap(handler: Any, method: str) -> Any:
        wraps.append(method)
        return real_wrap(handler, method)

    monkeypatch.setattr(grpc_errors, "_wrap", counting_wrap)
    server = grpc.aio.server(interceptors=[TranslateErrorsInterceptor()])
    handler = grpc.unary_unary_rpc_method_handler(echo)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("tamto.test.Echo", {"Echo": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ok_before, not_found_before = count("OK"), count("NOT_FOUND")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(METHOD)
            for n in range(5):
                assert await call(b"%d" % n, timeout=10) == b"%d" % n
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call(b"missing", timeout=10)
    finally:
        await server.stop(None)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert info.value.details() == "no such thing"
    assert count("OK") - ok_before == 5
    assert count("NOT_FOUND") - not_found_before == 1
    assert wraps == [METHOD], "the method's handler is wrapped once for all six calls"
