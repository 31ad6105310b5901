"""The async context manager every SDK object that holds a stream or task shares.

`async with thing:` opens it (`_open`, nothing by default) and closes it on leaving
the block (`close`), whatever the exit.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["AsyncClosing"]


class AsyncClosing:
    """Mixin: `__aenter__` awaits `_open` and returns the object, `__aexit__` awaits
    `close`."""

    async def _open(self) -> None:
        """Start what the object needs before use (nothing by default)."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
