"""`python -m tamto_gateway`: run a gateway."""

from tamto_common.service import main
from tamto_gateway.config import GatewayConfig
from tamto_gateway.server import setup

if __name__ == "__main__":
    main("gateway", GatewayConfig, setup)
