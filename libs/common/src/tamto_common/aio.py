"""Small asyncio combinators shared by the services' streaming handlers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


async def until_done(items: AsyncIterator[T], watched: asyncio.Task[None]) -> AsyncIterator[T]:
    """Yield from `items` until `watched` finishes; its exception, if any, is raised.

    A bidi handler uses it to stream responses while a task reads the client's
    requests: when the client half-closes, the response stream ends too.
    """
    iterator = aiter(items)
    while True:
        nxt = asyncio.ensure_future(anext(iterator))
        done, _ = await asyncio.wait({nxt, watched}, return_when=asyncio.FIRST_COMPLETED)
        if nxt in done:
            yield nxt.result()
            continue
        nxt.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await nxt
        watched.result()
        return
