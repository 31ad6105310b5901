"""Processing functions: deploy, update, pause, resume, delete, list, describe, status.

Reach it as `client.functions`; every call needs `admin` on `*`. A spec is a mapping
(or its JSON text) in the schema of docs/processing.md: name, inputs, output, code,
identity, parallelism, config. The gateway validates it and refuses a bad one with
`InvalidArgument` naming the field, step or expression, and a spec over a stream that
does not exist with `NotFound` naming the stream. Deploying creates an API key for the
spec's identity: the function reads and writes with that identity's permissions only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tamto_protocol.v1 import gateway_pb2
from tamto_sdk._calls import Calls

__all__ = ["FunctionInfo", "FunctionInputLag", "FunctionInstance", "FunctionStatus", "Functions"]

Spec = Mapping[str, Any] | str


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    """A deployed function.

    Attributes:
        name: its name.
        version: grows with every update; instances on an older one are replaced.
        state: ``"running"`` or ``"paused"``.
        identity: the identity it runs as.
        api_key_id: the id of the API key created for it at deploy.
        spec: the stored spec (as JSON would give it), with its version and state.
    """

    name: str
    version: int
    state: str
    identity: str
    api_key_id: str
    spec: Mapping[str, Any]

    @classmethod
    def _from_proto(cls, info: Any) -> FunctionInfo:
        return cls(
            name=info.name,
            version=int(info.version),
            state=info.state,
            identity=info.identity,
            api_key_id=info.api_key_id,
            spec=json.loads(info.spec_json) if info.spec_json else {},
        )


@dataclass(frozen=True, slots=True)
class FunctionInstance:
    """One instance's status, as the processing node running it last reported.

    Attributes:
        instance: ``<name>#<i>``.
        node: the processing node running it.
        version: the spec version it runs.
        processed, published: messages read and results published since it started.
        errors: messages sent to the dead-letter stream.
        last_error: why it last failed or dead-lettered ("" if never).
        restarts: times it was restarted after a failure.
        rate: messages processed per second since it started.
    """

    instance: str
    node: str
    version: int
    processed: int
    published: int
    errors: int
    last_error: str
    restarts: int
    rate: float


@dataclass(frozen=True, slots=True)
class FunctionInputLag:
    """How far behind the function is on one input: its subscription's backlog.

    Attributes:
        stream: the input stream.
        backlog_messages: messages not acked yet, over every partition.
        oldest_unacked_publish_time_us: publish time of the oldest (0: none waiting).
    """

    stream: str
    backlog_messages: int
    oldest_unacked_publish_time_us: int


@dataclass(frozen=True, slots=True)
class FunctionStatus:
    """A function, where each instance runs with its counters, and each input's lag."""

    function: FunctionInfo
    instances: tuple[FunctionInstance, ...]
    lag: tuple[FunctionInputLag, ...]

    @property
    def processed(self) -> int:
        return sum(i.processed for i in self.instances)

    @property
    def errors(self) -> int:
        return sum(i.errors for i in self.instances)

    @property
    def backlog_messages(self) -> int:
        return sum(lag.backlog_messages for lag in self.lag)

    @classmethod
    def _from_proto(cls, status: Any) -> FunctionStatus:
        return cls(
            function=FunctionInfo._from_proto(status.function),
            instances=tuple(
                FunctionInstance(
                    instance=i.instance,
                    node=i.node,
                    version=int(i.version),
                    processed=int(i.processed),
                    published=int(i.published),
                    errors=int(i.errors),
                    last_error=i.last_error,
                    restarts=int(i.restarts),
                    rate=float(i.rate),
                )
                for i in status.instances
            ),
            lag=tuple(
                FunctionInputLag(
                    stream=lag.stream,
                    backlog_messages=int(lag.backlog_messages),
                    oldest_unacked_publish_time_us=int(lag.oldest_unacked_publish_time_us),
                )
                for lag in status.lag
            ),
        )


def _spec_json(spec: Spec) -> str:
    return spec if isinstance(spec, str) else json.dumps(dict(spec))


class Functions:
    """Processing function administration; reach it as `client.functions` (module docstring)."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def deploy(self, spec: Spec) -> FunctionInfo:
        """Deploy a new function (`AlreadyExists` if one has its name)."""
        response = await self._calls.unary(
            self._calls.stub.DeployFunction,
            gateway_pb2.DeployFunctionRequest(spec_json=_spec_json(spec)),
        )
        return FunctionInfo._from_proto(response)

    async def update(self, spec: Spec) -> FunctionInfo:
        """Replace a deployed function's spec; its version grows and nodes roll onto it."""
        response = await self._calls.unary(
            self._calls.stub.UpdateFunction,
            gateway_pb2.DeployFunctionRequest(spec_json=_spec_json(spec)),
        )
        return FunctionInfo._from_proto(response)

    async def pause(self, name: str) -> FunctionInfo:
        """Stop the function's instances; its subscriptions keep their place."""
        response = await self._calls.unary(
            self._calls.stub.PauseFunction, gateway_pb2.FunctionRequest(name=name)
        )
        return FunctionInfo._from_proto(response)

    async def resume(self, name: str) -> FunctionInfo:
        """Start a paused function's instances again, from where they stopped."""
        response = await self._calls.unary(
            self._calls.stub.ResumeFunction, gateway_pb2.FunctionRequest(name=name)
        )
        return FunctionInfo._from_proto(response)

    async def delete(self, name: str) -> bool:
        """Remove the function, its API key, statuses and window state (False: unknown)."""
        response = await self._calls.unary(
            self._calls.stub.DeleteFunction, gateway_pb2.FunctionRequest(name=name)
        )
        return bool(response.deleted)

    async def list(self) -> list[FunctionInfo]:
        """Every deployed function, by name."""
        response = await self._calls.unary(
            self._calls.stub.ListFunctions, gateway_pb2.ListFunctionsRequest()
        )
        return [FunctionInfo._from_proto(f) for f in response.functions]

    async def describe(self, name: str) -> FunctionInfo:
        """The deployed function (`NotFound` if unknown)."""
        return (await self.status(name)).function

    async def status(self, name: str) -> FunctionStatus:
        """Where each instance runs, its counters and last error, and each input's lag."""
        response = await self._calls.unary(
            self._calls.stub.DescribeFunction, gateway_pb2.FunctionRequest(name=name)
        )
        return FunctionStatus._from_proto(response)
