"""A processing function's spec: what it reads, what it runs, where it writes, as whom.

Specs are stored in etcd as JSON (`tamto_functions.specs`) and are the only thing
the gateway, the CLI and the processing nodes share about a function. Every field
is validated here, once, and a bad one raises `InvalidArgument` naming it, so a
spec that reaches a processing node is well formed.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tamto_common.errors import InvalidArgument

#: A function's name: what its subscriptions, dead-letter stream and ids are named after.
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
#: Instances of one function, at most.
MAX_PARALLELISM = 64
#: A single-file module uploaded with a function, at most (bytes of source).
MAX_MODULE_BYTES = 256 * 1024
#: Inputs of one function, at most.
MAX_INPUTS = 8


class SubscriptionKind(enum.Enum):
    """How a function's instances share an input: any message anywhere, or keys in order."""

    SHARED = "shared"
    KEY_SHARED = "key_shared"


class State(enum.Enum):
    """Whether a function's instances run."""

    RUNNING = "running"
    PAUSED = "paused"


@dataclass(frozen=True, slots=True)
class Input:
    """One stream a function reads, through the function's subscription on it."""

    stream: str
    subscription: SubscriptionKind = SubscriptionKind.SHARED


@dataclass(frozen=True, slots=True)
class PythonCode:
    """User code: `entry` is ``module:callable``; `source`, when given, is that module's text.

    `per_message`: the callable takes one message's payload (bytes) and returns
    bytes, None or a list of bytes; otherwise it takes a `pyarrow.RecordBatch` and
    returns a RecordBatch, a Table or None.
    """

    entry: str
    source: str = ""
    per_message: bool = False


@dataclass(frozen=True, slots=True)
class Declarative:
    """Steps compiled to Arrow kernels (`tamto_functions.declarative`), as given."""

    steps: tuple[Mapping[str, Any], ...]


Code = PythonCode | Declarative


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """Everything a processing node needs to run a function."""

    name: str
    inputs: tuple[Input, ...]
    output: str
    code: Code
    identity: str
    parallelism: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    state: State = State.RUNNING
    #: Grows with every update, so instances can tell a new spec from the one they run.
    version: int = 1

    @property
    def subscription(self) -> str:
        """The subscription every instance of the function consumes through."""
        return f"fn-{self.name}"

    @property
    def dead_letters(self) -> str:
        """Where inputs the function failed on go, with the error in their headers."""
        return f"{self.name}.dlq"

    def instances(self) -> list[str]:
        """The instance ids of a running function (none while paused)."""
        if self.state is State.PAUSED:
            return []
        return [f"{self.name}#{i}" for i in range(self.parallelism)]


def validate(spec: FunctionSpec) -> FunctionSpec:
    """`spec` if it is well formed, else `InvalidArgument` naming the first bad field."""
    if not NAME.match(spec.name):
        raise InvalidArgument(
            f"name: {spec.name!r} is not a function name (a-z, 0-9, '_', '-'; 1-63 characters)"
        )
    if not spec.inputs:
        raise InvalidArgument("inputs: a function reads at least one stream")
    if len(spec.inputs) > MAX_INPUTS:
        raise InvalidArgument(f"inputs: at most {MAX_INPUTS} streams, got {len(spec.inputs)}")
    if not spec.output:
        raise InvalidArgument("output: a function needs an output stream")
    if any(i.stream == spec.output for i in spec.inputs):
        raise InvalidArgument(f"output: {spec.output!r} is also an input (a loop)")
    if not 1 <= spec.parallelism <= MAX_PARALLELISM:
        raise InvalidArgument(f"parallelism: must be 1-{MAX_PARALLELISM}, got {spec.parallelism}")
    if not spec.identity:
        raise InvalidArgument("identity: a function runs as an identity; name one")
    if isinstance(spec.code, PythonCode):
        _check_python(spec.code)
    elif not spec.code.steps:
        raise InvalidArgument("code.steps: a declarative function has at least one step")
    else:
        _check_window_placement(spec, spec.code)
    return spec


def _check_window_placement(spec: FunctionSpec, code: Declarative) -> None:
    """Several instances of a window function each keep the windows of the keys they get:
    only with key-shared inputs and the window keyed by the message key does every
    (window, key) live in one instance, so that its one result is the whole window's."""
    window = next(
        (s["window"] for s in code.steps if isinstance(s, Mapping) and "window" in s), None
    )
    if window is None or spec.parallelism == 1:
        return
    keyed = isinstance(window, Mapping) and str(window.get("key", "key")).strip() == "key"
    key_shared = all(i.subscription is SubscriptionKind.KEY_SHARED for i in spec.inputs)
    if not (keyed and key_shared):
        raise InvalidArgument(
            "parallelism: a window function with more than one instance needs key_shared"
            ' inputs and its window keyed by the message key (key: "key"), so that each'
            " key's windows are kept by one instance; else use parallelism 1"
        )


def _check_python(code: PythonCode) -> None:
    module, _, attribute = code.entry.partition(":")
    if not module or not attribute:
        raise InvalidArgument(f"code.entry: {code.entry!r} is not 'module:callable'")
    if len(code.source.encode()) > MAX_MODULE_BYTES:
        raise InvalidArgument(f"code.source: over {MAX_MODULE_BYTES} bytes")
