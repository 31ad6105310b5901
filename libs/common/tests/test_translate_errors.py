"""`TranslateErrorsInterceptor` on a real grpc.aio server: every call is timed
and its errors translated, and a method's wrapped handler is made once, not per
call (a crowd of 10,000 consumer streams paid that per stream)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tamto_common import grpc_errors
from tamto_common.errors import InvalidArgument, NotFound
from tamto_common.grpc_errors import RPC_SECONDS, TranslateErrorsInterceptor
from tamto_testing.grpc_servers import listen

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
    if request.startswith(b"long:"):  # a message of that many characters, each 2 bytes
        raise InvalidArgument("\u00e9" * int(request[5:]))
    return request


async def serving_echo() -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(interceptors=[TranslateErrorsInterceptor()])
    handler = grpc.unary_unary_rpc_method_handler(echo)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("tamto.test.Echo", {"Echo": handler}),)
    )
    port = listen(server)
    await server.start()
    return server, port


async def test_calls_are_timed_and_translated_with_one_wrapped_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wraps: list[str] = []
    real_wrap = grpc_errors._wrap

    def counting_wrap(handler: Any, method: str) -> Any:
        wraps.append(method)
        return real_wrap(handler, method)

    monkeypatch.setattr(grpc_errors, "_wrap", counting_wrap)
    server, port = await serving_echo()
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


async def test_an_error_of_any_length_arrives_with_its_status_and_a_capped_message() -> None:
    server, port = await serving_echo()
    answers: dict[int, tuple[grpc.StatusCode, str]] = {}
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(METHOD)
            for length in (10, 1_000_000):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call(b"long:%d" % length, timeout=10)
                answers[length] = (info.value.code(), info.value.details() or "")
    finally:
        await server.stop(None)
    assert answers[10] == (grpc.StatusCode.INVALID_ARGUMENT, "\u00e9" * 10)
    code, details = answers[1_000_000]
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details[:200])
    assert details.startswith("\u00e9" * 700)
    assert details.endswith("more characters)")
    assert len(details.encode()) <= grpc_errors.MAX_ERROR_MESSAGE_BYTES
