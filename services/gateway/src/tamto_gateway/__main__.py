"""`python -m tamto_gateway`: run a gateway."""

from tamto_common.grpc_io import use_polling_io

use_polling_io()  # before anything imports grpc (tamto_common.grpc_io)

from tamto_common.service import main  # noqa: E402
from tamto_gateway.config import GatewayConfig  # noqa: E402
from tamto_gateway.server import setup  # noqa: E402

if __name__ == "__main__":
    main("gateway", GatewayConfig, setup)
