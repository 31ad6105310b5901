"""StorageConfig: defaults, parsing and checks through the shared loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamto_common.config import load_config
from tamto_common.errors import ConfigError
from tamto_storage.config import StorageConfig


def test_defaults() -> None:
    config = load_config(StorageConfig, "storage", [], {})
    assert config.data_dir == Path(".tamto/data")
    assert config.fsync == "group"
    assert config.wal_options().group_commit
    assert config.wal_file_bytes == 64 * 1024 * 1024


def test_flags_and_environment() -> None:
    config = load_config(
        StorageConfig,
        "storage",
        ["--fsync", "interval", "--fsync-interval-ms", "20"],
        {"TAMTO_STORAGE_DATA_DIR": "/srv/tamto", "TAMTO_STORAGE_WAL_FILE_BYTES": "1024"},
    )
    options = config.wal_options()
    assert config.data_dir == Path("/srv/tamto")
    assert not options.group_commit
    assert options.fsync_interval_s == pytest.approx(0.02)
    assert options.file_bytes == 1024


def test_bad_fsync_mode_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--fsync .*must be one of group, interval"):
        load_config(StorageConfig, "storage", ["--fsync", "never"], {})


def test_a_segment_store_is_a_file_or_s3_uri() -> None:
    with pytest.raises(ConfigError, match=r"segment.store.*use a file:// or s3:// URI"):
        load_config(StorageConfig, "storage", ["--segment-store", "gs://bucket/segments"], {})
    config = load_config(
        StorageConfig, "storage", [], {"TAMTO_STORAGE_SEGMENT_STORE": "file:///srv/segments"}
    )
    assert config.segment_store == "file:///srv/segments"
