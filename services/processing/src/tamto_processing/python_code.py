"""User Python code: a callable found by import path, or in a module uploaded with the function.

Batch functions take a `pyarrow.RecordBatch` of messages (columns ``offset``,
``publish_time``, ``payload``, ``key``, ``headers``, ``id``, ``event_time``,
``producer``) and return a RecordBatch, a Table or None: the rows to publish, with
a ``payload`` column and optionally ``key``, ``headers`` and ``offset`` (the input
row each output row came from, which makes its dedup id exact). Per-message
functions take one payload and return bytes, None or a list of bytes.

Uploaded code runs in the processing node's process with its permissions, as a
Pulsar function's does: deploy rights are admin rights.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from tamto_functions.model import PythonCode

from tamto_common.errors import InvalidArgument

BatchFunction = Callable[[pa.RecordBatch], Any]


def load(code: PythonCode) -> BatchFunction:
    """The callable as a batch function, or `InvalidArgument`/`NotFound`-like errors naming it."""
    module_name, _, attribute = code.entry.partition(":")
    module = _uploaded(module_name, code.source) if code.source else _imported(module_name)
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise InvalidArgument(f"code.entry: {module_name!r} has no {attribute!r}")
    if not callable(target):
        raise InvalidArgument(f"code.entry: {code.entry!r} is not callable")
    return _per_message(target) if code.per_message else target


def _imported(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise InvalidArgument(f"code.entry: cannot import {name!r}: {exc}") from None


def _uploaded(name: str, source: str) -> types.ModuleType:
    """The uploaded module, executed once under a name unique to its text."""
    digest = hashlib.blake2b(source.encode(), digest_size=8).hexdigest()
    unique = f"tamto_fn_{digest}_{name.replace('.', '_')}"
    cached = sys.modules.get(unique)
    if cached is not None:
        return cached
    module = types.ModuleType(unique)
    try:
        exec(compile(source, f"<function module {name}>", "exec"), module.__dict__)
    except Exception as exc:
        raise InvalidArgument(f"code.source: the module fails to load: {exc!r}"[:500]) from None
    sys.modules[unique] = module
    return module


def _per_message(function: Callable[[bytes], Any]) -> BatchFunction:
    """A batch function calling `function` on each payload (Python per message, by choice)."""

    def run(batch: pa.RecordBatch) -> pa.Table:
        payloads: list[bytes] = []
        offsets: list[int] = []
        for offset, payload in zip(
            batch.column("offset").to_pylist(), batch.column("payload").to_pylist(), strict=True
        ):
            result = function(payload)
            for item in result if isinstance(result, list) else [result]:
                if item is None:
                    continue
                if not isinstance(item, bytes):
                    raise TypeError(f"a per-message function returns bytes, got {type(item)}")
                payloads.append(item)
                offsets.append(offset)
        return pa.table(
            {"payload": pa.array(payloads, pa.binary()), "offset": pa.array(offsets, pa.int64())}
        )

    return run
