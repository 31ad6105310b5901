"""One root error type for Tamto, with typed subclasses that carry policy.

Each error names the gRPC status it maps to and whether retrying can help.
Translation to and from gRPC happens in exactly one place per direction:
`tamto_common.grpc_errors` on the server side, `tamto_sdk.errors` on the client.
"""

from __future__ import annotations

import re

import grpc


class TamtoError(Exception):
    """Base of every error Tamto raises on purpose."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    retriable: bool = False

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        """The trailing metadata a call failing with this error ends with (none by default)."""
        return ()


class InvalidArgument(TamtoError):
    """The request itself is wrong; sending it again will not help."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class OutOfRange(InvalidArgument):
    """An offset below a partition's start (retention removed it) or past its end."""

    code = grpc.StatusCode.OUT_OF_RANGE


class NotFound(TamtoError):
    """A named thing (stream, subscription, partition) does not exist."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(TamtoError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(TamtoError):
    """The system is not in a state where the request can apply (e.g. a stale epoch)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class NotOwner(FailedPrecondition):
    """This router does not own the partition a client called it for (the direct
    path, docs/cluster.md section 5): the call ends with trailing metadata naming the
    owner it knows, so the client goes there (`trailing_metadata`)."""

    def __init__(self, message: str, owner_address: str, epoch: int = 0) -> None:
        super().__init__(message)
        self.owner_address = owner_address
        self.epoch = epoch

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((OWNER_METADATA, self.owner_address), (OWNER_EPOCH_METADATA, str(self.epoch)))


#: Trailing metadata of a `NotOwner` redirect: the owner's client address (empty when
#: not known or it serves no clients) and the epoch of its claim (0: not known).
OWNER_METADATA = "tamto-owner"
OWNER_EPOCH_METADATA = "tamto-owner-epoch"


class Unauthenticated(TamtoError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(TamtoError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Unavailable(TamtoError):
    """A dependency is down or moving; retry with backoff."""

    code = grpc.StatusCode.UNAVAILABLE
    retriable = True


class ResourceExhausted(TamtoError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    retriable = True


class DataLoss(TamtoError):
    """Stored data failed its checksum; the partition refuses to serve past it."""

    code = grpc.StatusCode.DATA_LOSS


def damaged_offsets_error(file: str, first: int, last: int | None, reason: str) -> DataLoss:
    """DATA_LOSS for stored data that failed its checks: the file and the offsets it covers.

    `last` None: the damage starts at `first` and its end is not known (a WAL
    frame whose header cannot be trusted). The wording is the contract
    `damaged_offsets` parses, so a service that only sees the gRPC status (the
    router) can step over the damaged range.
    """
    covered = f"offsets {first}-{last}" if last is not None else f"offsets {first}-"
    return DataLoss(f"data lost: {file} holding {covered} is damaged: {reason}")


_DAMAGED = re.compile(r"holding offsets (\d+)-(\d*) is damaged")


def damaged_offsets(message: str) -> tuple[int, int | None] | None:
    """(first, last or None) of a `damaged_offsets_error` message, or None for another."""
    match = _DAMAGED.search(message)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)) if match.group(2) else None


class ConfigError(TamtoError):
    """A configuration setting is invalid. Raised once, at the process edge."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"invalid setting {setting}: {problem}")
        self.setting = setting
        self.problem = problem
