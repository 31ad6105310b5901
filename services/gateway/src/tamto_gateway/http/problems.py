"""Errors as RFC 9457 problem details (`application/problem+json`): the one place an
exception becomes an HTTP status.

A `TamtoError` (or a downstream gRPC status) keeps its gRPC status, mapped to the
HTTP one by `HTTP_STATUS` (Google's published mapping of `google.rpc.Code`) and
named in the problem's `code` member, so an HTTP client sees the same status an
SDK would. Problems the HTTP layer finds itself (a body too large, a content type
it does not take) use HTTP's own statuses and say so in `code` as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import grpc
import structlog
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tamto_common.grpc_errors import status_for

log = structlog.get_logger(__name__)

PROBLEM_JSON = "application/problem+json"

#: gRPC status -> HTTP status: the one table (google.rpc.Code's HTTP mapping).
HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem: its HTTP status, the gRPC status name (or an HTTP-only code) and
    what went wrong."""

    status: int
    code: str
    detail: str

    def body(self) -> dict[str, Any]:
        return {
            "type": "about:blank",
            "title": phrase(self.status),
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        }

    def response(self) -> Response:
        headers = {"WWW-Authenticate": 'Bearer realm="tamto"'} if self.status == 401 else None
        return JSONResponse(
            self.body(), status_code=self.status, media_type=PROBLEM_JSON, headers=headers
        )


class HttpProblem(Exception):
    """A problem of the HTTP layer itself (RFC 9110 statuses: 413, 415, ...)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def problem_for(exc: BaseException) -> Problem:
    """The problem an exception answers with; an unexpected one is logged and answered
    as INTERNAL without its details (as `tamto_common.grpc_errors` does for gRPC)."""
    if isinstance(exc, HttpProblem):
        return Problem(exc.status, _http_code(exc.status), str(exc))
    if isinstance(exc, HTTPException):
        return Problem(exc.status_code, _http_code(exc.status_code), str(exc.detail))
    status = status_for(exc)
    if status is None:
        log.error("unhandled error in the HTTP API", exc_info=exc)
        status = (grpc.StatusCode.INTERNAL, "internal error")
    code, detail = status
    return Problem(HTTP_STATUS.get(code, 500), code.name, detail)


#: RFC 9110's reason phrases where Python's older ones differ, and nginx's 499.
_PHRASES = {413: "Content Too Large", 422: "Unprocessable Content", 499: "Client Closed Request"}


def phrase(status: int) -> str:
    """The reason phrase of an HTTP status (RFC 9110)."""
    try:
        return _PHRASES.get(status) or HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _http_code(status: int) -> str:
    """The `code` of an HTTP-only problem: its phrase as a constant."""
    return phrase(status).upper().replace(" ", "_").replace("-", "_")


async def problem_response(_: Request, exc: Exception) -> Response:
    """Starlette's exception handler for every error (`app.make_app`)."""
    return problem_for(exc).response()
