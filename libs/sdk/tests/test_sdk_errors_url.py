from __future__ import annotations

import asyncio

import grpc
import pytest

from tamto_sdk import errors
from tamto_sdk.url import Endpoint, parse_url


def _rpc_error(code: grpc.StatusCode, details: str = "boom") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


@pytest.mark.parametrize(
    ("status", "cls", "retriable"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidArgument, False),
        (grpc.StatusCode.NOT_FOUND, errors.NotFound, False),
        (grpc.StatusCode.ALREADY_EXISTS, errors.AlreadyExists, False),
        (grpc.StatusCode.FAILED_PRECONDITION, errors.FailedPrecondition, False),
        (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated, False),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied, False),
        (grpc.StatusCode.UNAVAILABLE, errors.Unavailable, True),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.ResourceExhausted, True),
        (grpc.StatusCode.DATA_LOSS, errors.DataLoss, False),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.Timeout, True),
        (grpc.StatusCode.INTERNAL, errors.Internal, False),
    ],
)
def test_from_rpc_error_maps_statuses(
    status: grpc.StatusCode, cls: type[errors.TamtoError], retriable: bool
) -> None:
    source = _rpc_error(status)
    error = errors.from_rpc_error(source)
    assert type(error) is cls
    assert isinstance(error, errors.TamtoError)
    assert error.code == status.name
    assert error.retriable is retriable
    assert str(error) == "boom"
    assert error.__cause__ is source


def test_unavailable_marked_no_responders_is_no_responders() -> None:
    """A request nobody consumes ends UNAVAILABLE with trailing metadata naming it."""
    marked = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(("tamto-no-responders", "1")),
        details="no responders: nobody consumes topic 'a'",
    )
    error = errors.from_rpc_error(marked)
    assert type(error) is errors.NoResponders
    assert isinstance(error, errors.Unavailable)
    assert error.code == "UNAVAILABLE"
    assert "nobody consumes" in str(error)
    assert (
        type(errors.from_rpc_error(_rpc_error(grpc.StatusCode.UNAVAILABLE))) is errors.Unavailable
    )


def test_unknown_status_is_internal_but_keeps_its_code() -> None:
    error = errors.from_rpc_error(_rpc_error(grpc.StatusCode.UNIMPLEMENTED))
    assert isinstance(error, errors.Internal)
    assert error.code == "UNIMPLEMENTED"


@pytest.mark.parametrize(
    ("status", "stdlib"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, TimeoutError),
        (grpc.StatusCode.INVALID_ARGUMENT, ValueError),
        (grpc.StatusCode.OUT_OF_RANGE, ValueError),
    ],
)
def test_errors_are_also_the_stdlib_ones_code_already_catches(
    status: grpc.StatusCode, stdlib: type[Exception]
) -> None:
    error = errors.from_rpc_error(_rpc_error(status, "too slow"))
    with pytest.raises(stdlib) as caught:
        raise error
    assert caught.value is error
    assert isinstance(error, errors.TamtoError)
    assert str(error) == "too slow"
    assert error.code == status.name


def test_out_of_range_is_its_own_kind_of_invalid_argument() -> None:
    error = errors.from_rpc_error(_rpc_error(grpc.StatusCode.OUT_OF_RANGE, "below start 6"))
    assert type(error) is errors.OutOfRange
    assert isinstance(error, errors.InvalidArgument)  # handlers written before it still work
    assert not isinstance(error, LookupError)  # not an IndexError: no sequence was indexed
    assert error.code == "OUT_OF_RANGE"
    assert error.retriable is False
    assert errors.OutOfRange("x").code == "OUT_OF_RANGE"


def test_sdk_timeout_is_asyncio_timeout_error() -> None:
    assert isinstance(errors.Timeout("late"), asyncio.TimeoutError)


@pytest.mark.parametrize(
    "cls", [errors.NotFound, errors.PermissionDenied, errors.Unavailable, errors.Internal]
)
def test_other_errors_are_not_stdlib_lookalikes(cls: type[errors.TamtoError]) -> None:
    error = cls("x")
    assert not isinstance(error, (LookupError, OSError, ValueError))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("tamto://127.0.0.1:7400", Endpoint("127.0.0.1", 7400)),
        ("127.0.0.1:9000", Endpoint("127.0.0.1", 9000)),
        ("tamto://gw.example", Endpoint("gw.example", 7400)),
        ("tamtos://gw.example:443", Endpoint("gw.example", 443, tls=True)),
        ("tamto://[::1]:7401", Endpoint("::1", 7401)),
    ],
)
def test_parse_url(url: str, expected: Endpoint) -> None:
    assert parse_url(url) == expected


def test_endpoint_target_brackets_ipv6() -> None:
    assert Endpoint("::1", 7400).target == "[::1]:7400"


@pytest.mark.parametrize("url", ["http://x:1", "tamto://", "x:notaport", "x:70000", "a/b:1"])
def test_parse_url_rejects_bad_addresses(url: str) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        parse_url(url)
