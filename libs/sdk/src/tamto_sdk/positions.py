"""Where a new subscription starts reading."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tamto_protocol.v1 import messages_pb2

__all__ = ["Start", "StartPosition"]


@dataclass(frozen=True, slots=True)
class StartPosition:
    """A start position; build one with `Start.earliest()`, `Start.latest()` or
    `Start.offset(n)`. It applies only when the subscription is created."""

    kind: Literal["earliest", "latest", "offset"]
    offset: int | None = None

    def _to_proto(self) -> Any:
        if self.kind == "earliest":
            return messages_pb2.StartPosition(earliest=True)
        if self.kind == "latest":
            return messages_pb2.StartPosition(latest=True)
        return messages_pb2.StartPosition(offset=self.offset)


class Start:
    """Factories for `StartPosition`."""

    @staticmethod
    def earliest() -> StartPosition:
        """From the oldest retained message."""
        return StartPosition("earliest")

    @staticmethod
    def latest() -> StartPosition:
        """Only messages published after the subscription is created."""
        return StartPosition("latest")

    @staticmethod
    def offset(n: int) -> StartPosition:
        """From offset `n` of every partition."""
        if n < 0:
            raise ValueError("offset must not be negative")
        return StartPosition("offset", n)
