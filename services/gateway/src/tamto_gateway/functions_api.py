"""The Gateway RPCs that deploy and steer processing functions, and report their status.

A mixin of `GatewayServicer` (like `SubscriptionsApi`): every call needs `admin` on
`*` (deploying runs code with an identity's rights). A spec is checked here
(`tamto_gateway.functions`), its streams must exist, and deploy creates an API key
for the spec's identity through auth (the same CreateApiKey an admin calls), then
stores spec and key with `tamto_functions.specs.SpecStore`, where processing nodes
find them. Nodes do the rest: a new version rolls out as each node sees it, a paused
function's instances stop. Describe reads each instance's status from etcd and each
input's backlog on the function's subscription from the routers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any

import grpc
from tamto_functions.model import FunctionSpec, State
from tamto_functions.specs import SpecStore, from_json, to_json

from tamto_common.apikeys import parse_api_key
from tamto_common.errors import AlreadyExists, NotFound, Unavailable
from tamto_gateway.functions import check_code, instance_status, streams_written
from tamto_gateway.guarded import Guarded
from tamto_protocol.v1 import auth_pb2, gateway_pb2

if TYPE_CHECKING:
    from tamto_common.tokens import Principal
    from tamto_gateway.security_api import AuthForwarder
    from tamto_gateway.streams import StreamRegistry
    from tamto_gateway.upstream import Upstream


class FunctionsApi(Guarded):
    """Deploy, update, pause, resume, delete, list and describe functions (module docstring)."""

    _auth: AuthForwarder
    _streams: StreamRegistry
    _upstream: Upstream
    #: Set by the gateway's setup: where function specs are stored.
    function_specs: SpecStore | None = None

    async def _functions_admin(
        self, context: grpc.aio.ServicerContext, action: str
    ) -> tuple[Principal, SpecStore]:
        principal = await self._security_admin(context, action)
        if self.function_specs is None:
            raise Unavailable("this gateway does not manage functions")
        return principal, self.function_specs

    async def _deployed(self, store: SpecStore, name: str) -> FunctionSpec:
        spec = await store.get(name)
        if spec is None:
            raise NotFound(f"function {name!r} is not deployed")
        return spec

    async def _checked(self, spec_json: str) -> FunctionSpec:
        """The spec if well formed, loadable and over streams that exist."""
        spec = from_json(spec_json)
        check_code(spec)
        named = [("inputs", i.stream) for i in spec.inputs]
        named += [("output", s) for s in streams_written(spec)]
        for field, stream in named:
            try:
                await self._streams.describe(stream, fresh=True)
            except NotFound:
                raise NotFound(f"{field}: stream {stream!r} does not exist") from None
        return spec

    async def _new_key(self, identity: str, principal: Principal, source: str) -> str:
        request = auth_pb2.CreateApiKeyRequest(identity=identity)
        created = await self._auth.call("CreateApiKey", request, principal.subject, source)
        return str(created.api_key)

    async def _drop_key(self, api_key: str | None, principal: Principal, source: str) -> None:
        if api_key is None:
            return
        request = auth_pb2.DeleteApiKeyRequest(key_id=parse_api_key(api_key).key_id)
        with contextlib.suppress(NotFound):  # deleted by an admin already
            await self._auth.call("DeleteApiKey", request, principal.subject, source)

    async def _info(self, store: SpecStore, spec: FunctionSpec) -> gateway_pb2.FunctionInfo:
        api_key = await store.api_key(spec.name)
        return gateway_pb2.FunctionInfo(
            name=spec.name,
            spec_json=to_json(spec).decode(),
            version=spec.version,
            state=spec.state.value,
            identity=spec.identity,
            api_key_id=parse_api_key(api_key).key_id if api_key else "",
        )

    async def DeployFunction(
        self, request: gateway_pb2.DeployFunctionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.FunctionInfo:
        principal, store = await self._functions_admin(context, "DeployFunction")
        spec = dataclasses.replace(await self._checked(request.spec_json), version=1)
        if await store.get(spec.name) is not None:
            raise AlreadyExists(f"function {spec.name!r} is deployed: update it, or delete it")
        api_key = await self._new_key(spec.identity, principal, context.peer() or "unknown")
        await store.put(spec, api_key)
        await self._audit_admin(context, principal, "function.deploy", f"function {spec.name}")
        return await self._info(store, spec)

    async def UpdateFunction(
        self, request: gateway_pb2.DeployFunctionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.FunctionInfo:
        principal, store = await self._functions_admin(context, "UpdateFunction")
        given = await self._checked(request.spec_json)
        old = await self._deployed(store, given.name)
        spec = dataclasses.replace(given, version=old.version + 1, state=old.state)
        source = context.peer() or "unknown"
        if spec.identity == old.identity:
            await store.put(spec)
        else:
            old_key = await store.api_key(old.name)
            await store.put(spec, await self._new_key(spec.identity, principal, source))
            await self._drop_key(old_key, principal, source)
        await self._audit_admin(
            context, principal, "function.update", f"function {spec.name} v{spec.version}"
        )
        return await self._info(store, spec)

    async def _set_state(
        self, request: gateway_pb2.FunctionRequest, context: grpc.aio.ServicerContext, state: State
    ) -> gateway_pb2.FunctionInfo:
        verb = "pause" if state is State.PAUSED else "resume"
        principal, store = await self._functions_admin(context, f"{verb.title()}Function")
        spec = await self._deployed(store, request.name)
        if spec.state is not state:
            spec = dataclasses.replace(spec, state=state)
            await store.put(spec)
            await self._audit_admin(context, principal, f"function.{verb}", f"function {spec.name}")
        return await self._info(store, spec)

    async def PauseFunction(
        self, request: gateway_pb2.FunctionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.FunctionInfo:
        return await self._set_state(request, context, State.PAUSED)

    async def ResumeFunction(
        self, request: gateway_pb2.FunctionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.FunctionInfo:
        return await self._set_state(request, context, State.RUNNING)

    async def DeleteFunction(
        self, request: gateway_pb2.FunctionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.DeleteFunctionResponse:
        principal, store = await self._functions_admin(context, "DeleteFunction")
        api_key = await store.api_key(request.name)
        deleted = await store.delete(request.name)
        await self._drop_key(api_key, principal, context.peer() or "unknown")
        if deleted:
            await self._audit_admin(
                context, principal, "function.delete", f"function {request.name}"
            )
        return gateway_pb2.DeleteFunctionResponse(deleted=deleted)

    async def ListFunctions(
        self, request: gateway_pb2.ListFunctionsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListFunctionsResponse:
        _, store = await self._functions_admin(context, "ListFunctions")
        infos = [await self._info(store, spec) for spec in await store.all()]
        return gateway_pb2.ListFunctionsResponse(functions=infos)

    async def DescribeFunction(
        self, request: gateway_pb2.FunctionRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.FunctionStatus:
        _, store = await self._functions_admin(context, "DescribeFunction")
        spec = await self._deployed(store, request.name)
        reported = await store.statuses(spec.name)
        instances = [
            gateway_pb2.FunctionInstanceStatus(**dataclasses.asdict(instance_status(i, r)))
            for i, r in sorted(reported.items())
        ]
        lag = await asyncio.gather(*(self._lag(spec, i.stream) for i in spec.inputs))
        return gateway_pb2.FunctionStatus(
            function=await self._info(store, spec), instances=instances, lag=lag
        )

    async def _lag(self, spec: FunctionSpec, stream: str) -> gateway_pb2.FunctionInputLag:
        """The backlog of the function's subscription on `stream` (none before it exists)."""
        try:
            definition = await self._streams.describe(stream)
        except NotFound:
            return gateway_pb2.FunctionInputLag(stream=stream)
        answers: list[Any] = await asyncio.gather(
            *(
                self._upstream.describe_subscription(stream, p, spec.subscription)
                for p in range(definition.partitions)
            )
        )
        found = [a for a in answers if a.exists]
        oldest = [t for a in found if (t := a.oldest_unacked_publish_time_us)]
        return gateway_pb2.FunctionInputLag(
            stream=stream,
            backlog_messages=sum(a.backlog_messages for a in found),
            oldest_unacked_publish_time_us=min(oldest, default=0),
        )
