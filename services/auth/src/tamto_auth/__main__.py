"""`python -m tamto_auth`: run the auth service."""

from __future__ import annotations

from tamto_common.grpc_io import use_polling_io

use_polling_io()  # before anything imports grpc (tamto_common.grpc_io)

from tamto_auth.config import AuthConfig  # noqa: E402
from tamto_auth.server import setup  # noqa: E402
from tamto_common.service import main  # noqa: E402

if __name__ == "__main__":
    main("auth", AuthConfig, setup)
