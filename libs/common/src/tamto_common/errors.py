"""One root error type for Tamto, with typed subclasses that carry policy.

Each error names the gRPC status it maps to and whether retrying can help.
Translation to and from gRPC happens in exactly one place per direction:
`tamto_common.grpc_errors` on the server side, `tamto_sdk.errors` on the client.
"""

from __future__ import annotations

import grpc


class TamtoError(Exception):
    """Base of every error Tamto raises on purpose."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    retriable: bool = False


class InvalidArgument(TamtoError):
    """The request itself is wrong; sending it again will not help."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(TamtoError):
    """A named thing (stream, subscription, partition) does not exist."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(TamtoError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(TamtoError):
    """The system is not in a state where the request can apply (e.g. a stale epoch)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


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


class DataCorruption(TamtoError):
    """Stored data failed its checksum; the partition refuses to serve past it."""

    code = grpc.StatusCode.DATA_LOSS


class ConfigError(TamtoError):
    """A configuration setting is invalid. Raised once, at the process edge."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"invalid setting {setting}: {problem}")
        self.setting = setting
        self.problem = problem
