"""The files of a partition's directory: their names, the old layout's, and removing them.

Layout under ``<data-dir>/streams/<stream>/partition=<p>/``: sealed Parquet
segments ``segment-<first>-<last>.parquet`` (see `tamto_storage.segments`), and,
hidden from Spark's file listing by their leading ``_``, ``_wal/`` (see
`tamto_storage.wal`), ``_epoch`` (see `tamto_storage.epoch`), ``_cursors/``
(see `tamto_storage.cursors`) and, when a stored batch could not be sealed,
``_quarantine/`` (see `tamto_storage.quarantine`). Directories of the old layout (``wal/``,
``epoch``, ``cursors/``) are renamed on load (`migrate_layout`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path

from tamto_common.durable import fsync_dir
from tamto_storage.epoch import FILE_NAME as EPOCH_FILE
from tamto_storage.wal_recovery import list_wal_files

WAL_DIR = "_wal"
CURSORS_DIR = "_cursors"
#: Names before segments shared the directory with Spark, renamed on load.
_OLD_NAMES = {"wal": WAL_DIR, "cursors": CURSORS_DIR, "epoch": EPOCH_FILE}


def migrate_layout(directory: Path) -> None:
    """Rename state of the pre-segment layout to the hidden names (blocking)."""
    moved = False
    for old, new in _OLD_NAMES.items():
        if (directory / old).exists() and not (directory / new).exists():
            os.replace(directory / old, directory / new)
            moved = True
    if moved:
        fsync_dir(directory)


def remove_sealed_wal_files(wal_dir: Path, sealed_end: int) -> None:
    """Remove the WAL files whose batches all end at or before `sealed_end` (blocking).

    A file's batches end where the next file begins, so the last file always stays
    (its name keeps the log's next offset).
    """
    if not wal_dir.is_dir():
        return
    files = list_wal_files(wal_dir)
    pairs = itertools.pairwise(files)
    remove_files([path for (_, path), (after, _) in pairs if after <= sealed_end])


def files_bytes(directory: Path) -> int:
    """The summed size of the regular files in `directory` (0 when it is missing)."""
    try:
        return sum(e.stat().st_size for e in os.scandir(directory) if e.is_file())
    except FileNotFoundError:
        return 0


def remove_files(paths: Sequence[Path]) -> None:
    """Unlink files (already gone is fine) and fsync their directories (blocking)."""
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
    for directory in {p.parent for p in paths}:
        fsync_dir(directory)
