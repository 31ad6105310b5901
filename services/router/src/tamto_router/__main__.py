"""`python -m tamto_router`: run a router."""

from tamto_common.grpc_io import use_polling_io

use_polling_io()  # before anything imports grpc (tamto_common.grpc_io)

from tamto_common.service import main  # noqa: E402
from tamto_router.config import RouterConfig  # noqa: E402
from tamto_router.server import setup  # noqa: E402

if __name__ == "__main__":
    main("router", RouterConfig, setup)
