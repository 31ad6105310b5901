"""`python -m tamto_processing`: run a processing node."""

from __future__ import annotations

from tamto_common.service import main
from tamto_processing.config import ProcessingConfig
from tamto_processing.server import setup

if __name__ == "__main__":
    main("processing", ProcessingConfig, setup)
