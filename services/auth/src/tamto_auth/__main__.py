"""`python -m tamto_auth`: run the auth service."""

from __future__ import annotations

from tamto_auth.config import AuthConfig
from tamto_auth.server import setup
from tamto_common.service import main

if __name__ == "__main__":
    main("auth", AuthConfig, setup)
