"""`python -m tamto_storage`: run a storage node."""

from tamto_common.grpc_io import use_polling_io

use_polling_io()  # before anything imports grpc (tamto_common.grpc_io)

from tamto_common.service import main  # noqa: E402
from tamto_storage.config import StorageConfig  # noqa: E402
from tamto_storage.server import setup  # noqa: E402

if __name__ == "__main__":
    main("storage", StorageConfig, setup)
