"""Function specs in etcd: the JSON form of `FunctionSpec`, and where each piece lives.

`/tamto/functions/<name>` holds the spec (no secret in it), `/tamto/function-keys/<name>`
the API key of the identity it runs as (written at deploy, read only by processing
nodes), `/tamto/function-status/<name>/<instance>` each running instance's status
and `/tamto/function-state/<name>/<instance>` a window function's open windows. The
gateway's admin API and the processing nodes both go through this module, so the JSON
has one schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aetcd

from tamto_common.errors import InvalidArgument
from tamto_functions.model import (
    Code,
    Declarative,
    FunctionSpec,
    Input,
    PythonCode,
    State,
    SubscriptionKind,
    validate,
)

SPECS_PREFIX = "/tamto/functions/"
KEYS_PREFIX = "/tamto/function-keys/"
STATUS_PREFIX = "/tamto/function-status/"
STATE_PREFIX = "/tamto/function-state/"


def to_json(spec: FunctionSpec) -> bytes:
    code: dict[str, Any]
    if isinstance(spec.code, PythonCode):
        code = {
            "python": {
                "entry": spec.code.entry,
                "source": spec.code.source,
                "per_message": spec.code.per_message,
            }
        }
    else:
        code = {"steps": list(spec.code.steps)}
    document = {
        "name": spec.name,
        "inputs": [{"stream": i.stream, "subscription": i.subscription.value} for i in spec.inputs],
        "output": spec.output,
        "code": code,
        "identity": spec.identity,
        "parallelism": spec.parallelism,
        "config": dict(spec.config),
        "state": spec.state.value,
        "version": spec.version,
    }
    return json.dumps(document, sort_keys=True).encode()


def from_json(data: bytes | str) -> FunctionSpec:
    """A spec from its JSON (stored, or given by a user), validated."""
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise InvalidArgument(f"spec: not JSON: {exc}") from None
    if not isinstance(document, Mapping):
        raise InvalidArgument("spec: a JSON object")
    try:
        spec = FunctionSpec(
            name=str(document["name"]),
            inputs=tuple(_input(i) for i in document["inputs"]),
            output=str(document["output"]),
            code=_code(document["code"]),
            identity=str(document["identity"]),
            parallelism=int(document.get("parallelism", 1)),
            config={str(k): str(v) for k, v in dict(document.get("config", {})).items()},
            state=State(document.get("state", "running")),
            version=int(document.get("version", 1)),
        )
    except KeyError as exc:
        raise InvalidArgument(f"spec: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"spec: {exc}") from None
    return validate(spec)


def _input(value: Any) -> Input:
    if isinstance(value, str):
        return Input(value)
    return Input(str(value["stream"]), SubscriptionKind(value.get("subscription", "shared")))


def _code(value: Any) -> Code:
    if "python" in value:
        python = value["python"]
        return PythonCode(
            str(python["entry"]), str(python.get("source", "")), bool(python.get("per_message"))
        )
    steps = value.get("steps")
    if not isinstance(steps, list):
        raise InvalidArgument("code: give 'python' (entry, source) or 'steps'")
    return Declarative(tuple(steps))


class SpecStore:
    """Reads and writes specs, keys and statuses in etcd."""

    def __init__(self, etcd: aetcd.Client) -> None:
        self._etcd = etcd

    async def put(self, spec: FunctionSpec, api_key: str | None = None) -> None:
        await self._etcd.put(f"{SPECS_PREFIX}{spec.name}".encode(), to_json(spec))
        if api_key is not None:
            await self._etcd.put(f"{KEYS_PREFIX}{spec.name}".encode(), api_key.encode())

    async def get(self, name: str) -> FunctionSpec | None:
        kv = await self._etcd.get(f"{SPECS_PREFIX}{name}".encode())
        return None if kv is None else from_json(kv.value)

    async def api_key(self, name: str) -> str | None:
        kv = await self._etcd.get(f"{KEYS_PREFIX}{name}".encode())
        return None if kv is None else bytes(kv.value).decode()

    async def all(self) -> list[FunctionSpec]:
        found = await self._etcd.get_prefix(SPECS_PREFIX.encode())
        return sorted((from_json(kv.value) for kv in found), key=lambda s: s.name)

    async def delete(self, name: str) -> bool:
        deleted = await self._etcd.delete(f"{SPECS_PREFIX}{name}".encode())
        await self._etcd.delete(f"{KEYS_PREFIX}{name}".encode())
        await self._etcd.delete_prefix(f"{STATUS_PREFIX}{name}/".encode())
        await self._etcd.delete_prefix(f"{STATE_PREFIX}{name}/".encode())
        return bool(deleted)

    async def put_status(self, name: str, instance: str, status: Mapping[str, Any]) -> None:
        key = f"{STATUS_PREFIX}{name}/{instance}".encode()
        await self._etcd.put(key, json.dumps(status, sort_keys=True).encode())

    async def delete_status(self, name: str, instance: str) -> None:
        await self._etcd.delete(f"{STATUS_PREFIX}{name}/{instance}".encode())

    async def statuses(self, name: str) -> dict[str, dict[str, Any]]:
        found = await self._etcd.get_prefix(f"{STATUS_PREFIX}{name}/".encode())
        return {bytes(kv.key).decode().rsplit("/", 1)[1]: json.loads(kv.value) for kv in found}
