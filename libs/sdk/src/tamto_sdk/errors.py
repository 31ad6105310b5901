"""Errors raised by the SDK: one root type, typed subclasses that carry retry policy.

Every failed RPC is translated by `from_rpc_error`, the only place in the SDK
that looks at gRPC status codes. Application code catches `TamtoError` (or a
subclass) and may consult `retriable` to decide whether trying again can help.

Two errors are also the standard library's, as nats-py's are, so code written
against stdlib exceptions handles them without knowing the SDK: `Timeout` is a
`TimeoutError` (so also `asyncio.TimeoutError`) and `InvalidArgument` a
`ValueError` (and so `OutOfRange`, one kind of it). No other pair is made on
purpose: `NotFound` as `LookupError` would be caught by handlers meant for a
missing dict key, `OutOfRange` as `IndexError` likewise (it is a `LookupError`
too, for a sequence index), and `PermissionDenied` as `PermissionError` would
make it an `OSError` with errno semantics.
"""

from __future__ import annotations

import grpc

__all__ = [
    "AlreadyExists",
    "Closed",
    "DataLoss",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NoResponders",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "ResourceExhausted",
    "TamtoError",
    "Timeout",
    "Unauthenticated",
    "Unavailable",
    "UndecodableBatch",
    "from_rpc_error",
]


class TamtoError(Exception):
    """Root of every error the SDK raises.

    Attributes:
        code: the gRPC status name the error corresponds to (e.g. ``"NOT_FOUND"``).
        retriable: whether sending the same request again may succeed.
    """

    default_code: str = "UNKNOWN"
    default_retriable: bool = False

    def __init__(
        self, message: str = "", *, code: str | None = None, retriable: bool | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str = code if code is not None else self.default_code
        self.retriable: bool = retriable if retriable is not None else self.default_retriable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r})"


class InvalidArgument(TamtoError, ValueError):
    """The request itself is wrong; sending it again will not help.

    Also a `ValueError`, so ``except ValueError`` catches it.
    """

    default_code = "INVALID_ARGUMENT"


class OutOfRange(InvalidArgument):
    """An offset outside what a partition holds: below its start (retention or
    truncation removed those messages) or past its end.

    A kind of `InvalidArgument` (and so a `ValueError`), as the server's
    ``OutOfRange`` is: code that catches `InvalidArgument` still catches it.
    The message names the partition's start; read from there instead.
    """

    default_code = "OUT_OF_RANGE"


class NotFound(TamtoError):
    """A named thing (stream, subscription, partition) does not exist."""

    default_code = "NOT_FOUND"


class AlreadyExists(TamtoError):
    """The thing to create exists already."""

    default_code = "ALREADY_EXISTS"


class FailedPrecondition(TamtoError):
    """The system is not in a state where the request can apply."""

    default_code = "FAILED_PRECONDITION"


class Unauthenticated(TamtoError):
    """The API key or token was refused."""

    default_code = "UNAUTHENTICATED"


class PermissionDenied(TamtoError):
    """The identity is authenticated but not allowed to do this."""

    default_code = "PERMISSION_DENIED"


class Unavailable(TamtoError):
    """The service or a dependency is down or moving; retry with backoff."""

    default_code = "UNAVAILABLE"
    default_retriable = True


class NoResponders(Unavailable):
    """A request no consumer in the cluster could receive (nobody's pattern matches
    its topic): it fails at once, as NATS answers "no responders" (status 503),
    instead of waiting for its timeout. `request(..., wait_for_responder=True)` waits.

    A kind of `Unavailable`: retrying once a responder subscribed may succeed.
    """


#: Trailing metadata marking a request's UNAVAILABLE as `NoResponders`.
NO_RESPONDERS_METADATA = "tamto-no-responders"


class ResourceExhausted(TamtoError):
    """A quota or buffer is full; retry later."""

    default_code = "RESOURCE_EXHAUSTED"
    default_retriable = True


class DataLoss(TamtoError):
    """Stored data is corrupt or lost."""

    default_code = "DATA_LOSS"


class UndecodableBatch(DataLoss):
    """A delivered batch whose Arrow buffers fail validation: the consumer raises
    it in place of the batch and goes on with the next one.

    It names where the messages are (`stream`, `partition`, `offset_ranges`).
    Pass it to `Consumer.ack` to skip them, or to `Consumer.nack` to have them
    redelivered (past the stream's ``max_deliveries`` they go to its dead-letter
    stream, which is how to term them).
    """

    def __init__(
        self,
        reason: str,
        *,
        stream: str,
        partition: int,
        offset_ranges: list[tuple[int, int]],
        delivery_count: int,
    ) -> None:
        where = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in offset_ranges)
        super().__init__(
            f"undecodable batch from the server: stream {stream!r} partition {partition} "
            f"offsets {where}: {reason}"
        )
        self.stream = stream
        self.partition = partition
        self.delivery_count = delivery_count
        self._ranges = list(offset_ranges)

    def offset_ranges(self) -> list[tuple[int, int]]:
        """The offsets of the batch as inclusive (first, last) runs, as `MessageBatch`'s."""
        return list(self._ranges)

    @property
    def count(self) -> int:
        """How many messages the batch holds."""
        return sum(last - first + 1 for first, last in self._ranges)


class Timeout(TamtoError, TimeoutError):
    """The operation did not complete in time; it may or may not have taken effect.

    Also the builtin `TimeoutError` (which `asyncio.TimeoutError` is), so
    ``except TimeoutError`` catches it.
    """

    default_code = "DEADLINE_EXCEEDED"
    default_retriable = True


class Internal(TamtoError):
    """An unexpected server-side failure."""

    default_code = "INTERNAL"


class Closed(TamtoError):
    """The client, producer or consumer was closed; the operation cannot proceed."""

    default_code = "CANCELLED"


_BY_STATUS: dict[grpc.StatusCode, type[TamtoError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.ABORTED: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.DATA_LOSS: DataLoss,
    grpc.StatusCode.DEADLINE_EXCEEDED: Timeout,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNIMPLEMENTED: Internal,
    grpc.StatusCode.UNKNOWN: Internal,
    grpc.StatusCode.CANCELLED: Unavailable,
}


#: What gRPC says (as INTERNAL or UNKNOWN) when the connection under a call was torn
#: down mid-call, e.g. by the peer's process dying: the request may or may not have
#: arrived. Matched in lower case.
_CONNECTION_LOST = (
    "error from core",
    "stream removed",
    "rst_stream",
    "socket closed",
    "connection reset",
    "broken pipe",
    "goaway",
    "end of tcp stream",
)


def connection_lost(status: grpc.StatusCode, details: str | None) -> bool:
    """Whether a call ended because its connection was torn down mid-call, not by the server."""
    if status not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        return False
    text = (details or "").lower()
    return any(sign in text for sign in _CONNECTION_LOST)


def from_rpc_error(error: grpc.aio.AioRpcError, *, deduplicated: bool = False) -> TamtoError:
    """Translate a failed gRPC call into the matching `TamtoError` subclass.

    The returned error keeps the original status name in ``code`` and chains the
    gRPC error as its ``__cause__``. `deduplicated`: the request carries ids the
    server deduplicates (a publish with message ids), so sending it again is safe
    even when it may have been applied: a connection torn down mid-call
    (`connection_lost`) is then a retriable `Unavailable` instead of `Internal`.
    """
    code, details = error.code(), error.details()
    translated: TamtoError
    if deduplicated and connection_lost(code, details):
        translated = Unavailable(f"connection lost mid-call: {details}", code=code.name)
    elif code is grpc.StatusCode.UNAVAILABLE and _no_responders(error):
        translated = NoResponders(details or code.name, code=code.name)
    else:
        translated = from_status(code, details)
    translated.__cause__ = error
    return translated


def _no_responders(error: grpc.aio.AioRpcError) -> bool:
    return any(key == NO_RESPONDERS_METADATA for key, _ in error.trailing_metadata() or ())


def from_status(status: grpc.StatusCode, details: str | None) -> TamtoError:
    """The `TamtoError` for a call that ended with `status` (see `from_rpc_error`)."""
    cls = _BY_STATUS.get(status, Internal)
    return cls(details or status.name, code=status.name)
