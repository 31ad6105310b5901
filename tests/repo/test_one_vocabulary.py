"""Server and SDK name one concept with one type (`Permission` was defined
twice and the error names had drifted, `DataCorruption` vs `DataLoss`)."""

from __future__ import annotations

import tamto_common.errors
import tamto_common.policy
import tamto_sdk.errors
import tamto_sdk.security


def test_one_permission_and_identity_kind() -> None:
    assert tamto_common.policy.Permission is tamto_sdk.security.Permission
    assert tamto_common.policy.IdentityKind is tamto_sdk.security.IdentityKind


def test_one_name_per_status_code() -> None:
    """Where server and SDK both have an error for a gRPC status, it has the same name."""
    server = {
        value.code.name: name
        for name, value in vars(tamto_common.errors).items()
        if isinstance(value, type)
        and issubclass(value, tamto_common.errors.TamtoError)
        and value is not tamto_common.errors.TamtoError  # the base: any INTERNAL
        and "code" in vars(value)
    }
    client = {
        value.default_code: name
        for name, value in vars(tamto_sdk.errors).items()
        if isinstance(value, type)
        and issubclass(value, tamto_sdk.errors.TamtoError)
        and "default_code" in vars(value)
    }
    assert server["DATA_LOSS"] == client["DATA_LOSS"] == "DataLoss"
    shared = server.keys() & client.keys()
    assert len(shared) >= 8, shared
    drift = {code: (server[code], client[code]) for code in shared if server[code] != client[code]}
    assert drift == {}, f"(server name, SDK name) by status: {drift}"
