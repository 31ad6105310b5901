"""The end of a pipelined stream: every call read before the client half-closed is
answered, whenever it finishes (`tamto_common.pipelined.answer_calls`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tamto_common.decoding import Undecodable
from tamto_common.pipelined import answer_calls
from tamto_protocol.v1 import router_pb2
from tamto_testing.waiting import eventually

METHOD = "/tamto.v1.Router/AppendStream"


async def requests_from(
    queue: asyncio.Queue[router_pb2.RouterAppendRequest | None],
) -> AsyncIterator[router_pb2.RouterAppendRequest | Undecodable]:
    while (request := await queue.get()) is not None:
        yield request


async def test_a_call_finishing_after_the_half_close_is_still_answered() -> None:
    queue: asyncio.Queue[router_pb2.RouterAppendRequest | None] = asyncio.Queue()
    release = asyncio.Event()

    async def handle(request: router_pb2.RouterAppendRequest) -> router_pb2.RouterAppendResponse:
        if request.call_id == 2:
            await release.wait()
        return router_pb2.RouterAppendResponse(base_offset=request.call_id)

    answers = answer_calls(
        requests_from(queue), handle, router_pb2.RouterAppendStreamResponse, METHOD
    )
    queue.put_nowait(router_pb2.RouterAppendRequest(call_id=1))
    first = await anext(answers)
    assert first.call_id == 1
    # While the answer of call 1 is being sent, call 2 comes, the client half-closes,
    # and only then does call 2 finish: its answer is queued behind the end of the
    # requests.
    queue.put_nowait(router_pb2.RouterAppendRequest(call_id=2))
    queue.put_nowait(None)
    await eventually(queue.empty, 5, "the reader to take call 2 and the end")
    release.set()
    await asyncio.wait(asyncio.all_tasks() - {asyncio.current_task()})
    rest = [answer.call_id async for answer in answers]
    assert rest == [2]
