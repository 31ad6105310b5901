"""A full disk: recognising it, the refusal a client gets, the gauge and the alert line.

When a write fails for lack of space (ENOSPC, or EDQUOT for a quota) storage
refuses what it could not write with RESOURCE_EXHAUSTED naming this node and the
path, acknowledges nothing it did not write, keeps serving reads, and tries
again on the next append or sealing round: it resumes by itself once space
returns. `tamto_storage_disk_full` is 1 from the first such failure until a
write succeeds again; the transition is logged once each way, at error level
("storage disk full", the line to alert on) and back.

The gauge lives here rather than in `tamto_storage.metrics` because it goes with
the state it reports: one per storage process.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TypeGuard

import structlog
from prometheus_client import Gauge

from tamto_common.errors import ResourceExhausted

log = structlog.get_logger(__name__)

DISK_FULL = Gauge(
    "tamto_storage_disk_full",
    "1 while this storage node's disk is full: an append (or a seal) failed for lack of "
    "space and none has succeeded since; appends are refused with RESOURCE_EXHAUSTED "
    "meanwhile",
)

_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_node = "storage"
#: What found the disk full and has not written since: "appends" (the WAL, cursor
#: commits, epochs) and "seals" (the sealer). A seal that fits does not clear an
#: append that did not, and the other way round.
_full: set[str] = set()


def set_node(name: str) -> None:
    """Name this node (its member id) in refusals and log lines."""
    global _node
    _node = name


def is_disk_full(exc: BaseException) -> TypeGuard[OSError]:
    """Whether `exc` is a write failing for lack of space."""
    return isinstance(exc, OSError) and exc.errno in _NO_SPACE


def refused(path: Path | str, exc: OSError, source: str = "appends") -> ResourceExhausted:
    """Record a write to `path` that failed for lack of space; the error for the caller."""
    if not _full:
        DISK_FULL.set(1)
        log.error(
            "storage disk full",
            node=_node,
            path=str(path),
            free_bytes=_free_bytes(path),
            error=exc.strerror,
            alert="tamto_storage_disk_full",
        )
    _full.add(source)
    return ResourceExhausted(
        f"storage node {_node}: disk full writing {path} ({exc.strerror}); "
        "appends are refused until space returns"
    )


@contextlib.contextmanager
def refusing_when_full() -> Iterator[None]:
    """Within the block, a write failing for lack of space raises the refusal (`refused`)."""
    try:
        yield
    except OSError as exc:
        if is_disk_full(exc):
            raise refused(exc.filename or "the data directory", exc) from None
        raise


def written(source: str = "appends") -> None:
    """A write of `source` succeeded: once no source finds the disk full, it is not."""
    if source in _full:
        _full.discard(source)
        if not _full:
            DISK_FULL.set(0)
            log.warning("storage disk space available again", node=_node)


def _free_bytes(path: Path | str) -> int | None:
    for candidate in (Path(path), *Path(path).parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None
