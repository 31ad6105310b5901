"""`python -m tamto_router`: run a router."""

from tamto_common.service import main
from tamto_router.config import RouterConfig
from tamto_router.server import setup

if __name__ == "__main__":
    main("router", RouterConfig, setup)
