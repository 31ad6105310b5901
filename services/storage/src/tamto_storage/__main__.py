"""`python -m tamto_storage`: run a storage node."""

from tamto_common.service import main
from tamto_storage.config import StorageConfig
from tamto_storage.server import setup

if __name__ == "__main__":
    main("storage", StorageConfig, setup)
