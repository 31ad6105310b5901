"""What the gateway checks in a function spec before it stores one, and its status read back.

A spec is validated field by field (`tamto_functions.model`); then its code must be
loadable. Declarative steps are compiled here exactly as a processing node compiles
them, so an unknown step or an expression that does not parse is refused at deploy.
Uploaded Python source is compiled (a syntax error is refused) and its entry must be
defined at the module's top level; the gateway never runs user code. An entry found by
import path lives in the processing nodes' environment, not the gateway's: a node that
cannot import it reports that as the instance's last error in the function's status.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tamto_functions.model import Declarative, FunctionSpec, PythonCode

from tamto_common.errors import InvalidArgument


def check_code(spec: FunctionSpec) -> None:
    """`InvalidArgument` naming the step, expression or entry that cannot be loaded."""
    if isinstance(spec.code, Declarative):
        # Imported when a declarative spec comes: polars costs every gateway start
        # a third of a CPU second otherwise.
        from tamto_functions.declarative import compile_steps

        compile_steps(spec.code.steps, spec.output)
    elif spec.code.source:
        _check_source(spec.code)


def _check_source(code: PythonCode) -> None:
    module, _, attribute = code.entry.partition(":")
    try:
        tree = ast.parse(code.source, f"<function module {module}>")
    except SyntaxError as exc:
        raise InvalidArgument(
            f"code.source: line {exc.lineno}: {exc.msg} (the module does not compile)"
        ) from None
    top = attribute.split(".")[0]
    if top not in _top_level_names(tree):
        raise InvalidArgument(
            f"code.entry: the uploaded module {module!r} defines no {top!r} at its top level"
        )


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def streams_written(spec: FunctionSpec) -> list[str]:
    """Every stream the function may publish to but its dead-letter stream, output first."""
    written = [spec.output]
    if isinstance(spec.code, Declarative):
        from tamto_functions.declarative import compile_steps

        route = compile_steps(spec.code.steps, spec.output).route
        if route is not None:
            _, outputs, default = route
            written.extend(outputs.values())
            if default is not None:
                written.append(default)
    return list(dict.fromkeys(written))


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    """One instance's status as a processing node last wrote it."""

    instance: str
    node: str
    version: int
    processed: int
    published: int
    errors: int
    last_error: str
    restarts: int
    #: Messages processed per second since the instance started.
    rate: float


def instance_status(instance: str, reported: Mapping[str, Any]) -> InstanceStatus:
    """The status a node stored (`tamto_processing.node`) as typed values."""
    processed = int(reported.get("processed", 0))
    started = float(reported.get("started_at", 0.0))
    updated = float(reported.get("updated_at", time.time()))
    elapsed = updated - started if started else 0.0
    return InstanceStatus(
        instance=instance,
        node=str(reported.get("node", "")),
        version=int(reported.get("version", 0)),
        processed=processed,
        published=int(reported.get("published", 0)),
        errors=int(reported.get("errors", 0)),
        last_error=str(reported.get("last_error", "")),
        restarts=int(reported.get("restarts", 0)),
        rate=processed / elapsed if elapsed > 0 else 0.0,
    )
