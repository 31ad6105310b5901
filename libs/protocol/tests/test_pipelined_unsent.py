"""A request whose write on the stream failed goes unary (`PipelinedCalls`).

The race this covers cannot be forced on a real server: the first write to a
peer without the stream method sometimes fails with INTERNAL ("Internal error
from Core") instead of the peer's UNIMPLEMENTED, because gRPC replaces the
status when a write meets a call that already ended. A fake channel (this
module's unit test only) makes every stream write fail that way; the real
paths are in libs/common/tests/test_pipelined.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tamto_protocol.pipelined import PipelinedCalls
from tamto_protocol.v1 import router_pb2

CORE = grpc.aio.AioRpcError(
    grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "Internal error from Core"
)


class _EndedCall:
    """A stream call that ended before its first write got out."""

    async def write(self, data: bytes) -> None:
        raise CORE

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._answers()

    async def _answers(self) -> AsyncIterator[Any]:
        raise CORE
        yield  # pragma: no cover - an async generator that raises at once

    def done_writing(self) -> None:
        pass

    def cancel(self) -> bool:
        return True


class _Channel:
    def __init__(self) -> None:
        self.unary_requests: list[bytes] = []
        self.unary_timeouts: list[float | None] = []

    def stream_stream(self, method: str, **_: Any) -> Any:
        return lambda metadata=None: _EndedCall()

    def unary_unary(self, method: str, **_: Any) -> Any:
        async def call(
            request: bytes,
            timeout: float | None = None,  # noqa: ASYNC109 - a unary call's signature
            metadata: Any = None,
        ) -> Any:
            self.unary_requests.append(request)
            self.unary_timeouts.append(timeout)
            return router_pb2.RouterAppendResponse(base_offset=len(self.unary_requests))

        return call


@pytest.mark.parametrize("fallback", [True, False])
async def test_a_request_never_written_goes_unary_or_raises_its_status(fallback: bool) -> None:
    channel = _Channel()
    calls = PipelinedCalls(
        channel,  # the fake has the two methods used
        "/tamto.v1.Router/AppendStream",
        router_pb2.RouterAppendStreamResponse,
        fallback=("/tamto.v1.Router/Append", router_pb2.RouterAppendResponse) if fallback else None,
    )
    try:
        if fallback:
            answer = await calls(lambda call_id: f"req-{call_id}".encode(), timeout=10)
            assert answer.base_offset == 1
            assert channel.unary_requests == [b"req-0"]  # unary calls carry call id 0
            timeout = channel.unary_timeouts[0]
            assert timeout is not None
            assert 0 < timeout <= 10
        else:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await calls(lambda call_id: b"req", timeout=10)
            assert raised.value.code() is grpc.StatusCode.INTERNAL
            assert channel.unary_requests == []
    finally:
        await calls.close()
