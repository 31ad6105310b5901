"""Checks real HTTP answers against the gateway's own /openapi.json: the status must
be one the document lists for the route (or `default`), and the body must validate
against that answer's schema (JSON Schema 2020-12, as OpenAPI 3.1 has it)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT_URI = "urn:tamto:openapi"


class Contract:
    """The document one gateway serves, and checks against it."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        self._registry: Registry[Any] = Registry().with_resource(DOCUMENT_URI, resource)
        self._templates = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"), path)
            for path in document["paths"]
        ]

    def template(self, path: str) -> str | None:
        matches = [t for pattern, t in self._templates if pattern.match(path)]
        return min(matches, key=lambda t: t.count("{")) if matches else None  # literal wins

    def check(self, response: httpx.Response) -> None:
        """Assert `response` is what the document says its route answers (a path it
        does not list: a problem)."""
        request = response.request
        path = self.template(request.url.path)
        if path is None:
            assert response.headers["content-type"] == "application/problem+json"
            schema = {"$ref": f"{DOCUMENT_URI}#/components/schemas/Problem"}
            Draft202012Validator(schema, registry=self._registry).validate(response.json())
            return
        operation = self.document["paths"][path].get(request.method.lower())
        assert operation is not None, f"{request.method} {path} is not in /openapi.json"
        answers = operation["responses"]
        answer = answers.get(str(response.status_code)) or answers.get("default")
        assert answer is not None, f"{response.status_code} not listed for {request.method} {path}"
        content = answer.get("content")
        if not content:
            assert not response.content, f"{request.method} {path} answered a body: {response.text}"
            return
        media = response.headers["content-type"].split(";")[0]
        assert media in content, f"{media} not listed for {request.method} {path}"
        if media.endswith("json"):
            status = (
                str(response.status_code) if str(response.status_code) in answers else "default"
            )
            pointer = "/".join(
                p.replace("~", "~0").replace("/", "~1")
                for p in (
                    "paths",
                    path,
                    request.method.lower(),
                    "responses",
                    status,
                    "content",
                    media,
                    "schema",
                )
            )
            schema = {"$ref": f"{DOCUMENT_URI}#/{quote(pointer)}"}
            Draft202012Validator(schema, registry=self._registry).validate(response.json())
