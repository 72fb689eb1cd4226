"""Every answer an HTTP test receives, checked against the OpenAPI document the service
serves: the operation its method and path match, a response declared for its status, the
headers that response declares (X-Request-ID on every one), its content type among that
response's, and its body valid against that schema (types, required fields, enums,
formats). Hooked into every test client (tests/conftest.py), so
the document cannot drift from what the service answers without a test failing.

Paths the document does not describe (/openapi.json, /docs, a path that exists nowhere)
are not checked: there is nothing to check them against.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
from openapi_schema_validator import OAS31Validator, oas31_format_checker


class AnswerChecker:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.routes: list[tuple[str, re.Pattern[str], int, dict[str, Any]]] = [
            (method, re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"),
             path.count("{"), operation)
            for path, item in document["paths"].items()
            for method, operation in item.items()]
        self.validators: dict[tuple[str, str, str], Callable[[Any], None]] = {}
        self.checked: list[tuple[str, int]] = []

    def operation(self, method: str, path: str) -> dict[str, Any] | None:
        found = [(params, op) for m, pattern, params, op in self.routes
                 if m == method.lower() and pattern.match(path)]
        if not found:
            return None
        # The fewest parameters wins: /v1/memories/batch over /v1/memories/{memory_id}.
        return min(found, key=lambda match: match[0])[1]

    def validator(self, operation_id: str, status: str, kind: str,
                  schema: dict[str, Any]) -> Callable[[Any], None]:
        key = (operation_id, status, kind)
        if key not in self.validators:
            self.validators[key] = OAS31Validator(
                {**schema, "components": self.document["components"]},
                format_checker=oas31_format_checker).validate
        return self.validators[key]

    def header(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A response's header object, its $ref followed."""
        ref = spec.get("$ref")
        if ref is None:
            return spec
        found: dict[str, Any] = self.document["components"]["headers"][ref.rsplit("/", 1)[1]]
        return found

    def check(self, method: str, path: str, status: int, headers: httpx.Headers,
              body: bytes, json_body: Callable[[], Any]) -> None:
        operation = self.operation(method, path)
        if operation is None:
            return
        name = operation["operationId"]
        declared = operation["responses"].get(str(status))
        assert declared is not None, (
            f"{name} answered {status}, which the OpenAPI document does not declare: "
            f"{body[:300]!r}")
        missing = [h for h, spec in declared.get("headers", {}).items()
                   if self.header(spec).get("required") and h not in headers]
        assert not missing, f"{name} {status} answered without the headers {missing}"
        content = declared.get("content", {})
        kind = headers.get("content-type", "").split(";")[0].strip()
        if not content:
            assert not body, f"{name} {status} has no body in the document: {body[:300]!r}"
        else:
            assert kind in content, (
                f"{name} {status} answered {kind or 'no content type'}; the document "
                f"declares {sorted(content)}")
            schema = content[kind].get("schema")
            if schema is not None and kind.endswith("json"):
                self.validator(name, str(status), kind, schema)(json_body())
        self.checked.append((name, status))

    async def __call__(self, response: httpx.Response) -> None:
        """As an httpx response hook."""
        await response.aread()
        self.check(response.request.method, response.request.url.path,
                   response.status_code, response.headers, response.content, response.json)
