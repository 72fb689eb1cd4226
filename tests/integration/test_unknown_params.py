"""Every /v1 operation refuses a query parameter it does not take, naming it, and changes
nothing. Found by an exploratory probe: `DELETE /v1/memories/{id}?user_id=alice` deleted
Bob's memory, the parameter its caller meant as a guard silently ignored."""

from __future__ import annotations

import re

import httpx
import pytest

from app.main import create_app
from app.settings import Settings

SOME_ID = "0190b2a4-1c2d-7000-8000-000000000001"


def operations() -> list[tuple[str, str]]:
    """Every /v1 operation the OpenAPI document declares, its path ids filled in."""
    app = create_app(Settings(embedder="hash", _env_file=None))  # type: ignore[call-arg]
    found = []
    for template, methods in app.openapi()["paths"].items():
        if template.startswith("/v1"):
            path = re.sub(r"\{[a-z_]+\}", SOME_ID, template)
            found.extend((method.upper(), path) for method in methods)
    return sorted(found)


OPERATIONS = operations()


def test_every_operation_is_covered() -> None:
    assert len(OPERATIONS) >= 20
    assert ("DELETE", f"/v1/memories/{SOME_ID}") in OPERATIONS


@pytest.mark.parametrize(("method", "path"), OPERATIONS,
                         ids=[f"{m} {p}" for m, p in OPERATIONS])
async def test_an_unknown_query_parameter_is_422_naming_it(
    client: httpx.AsyncClient, method: str, path: str,
) -> None:
    made = await client.post("/v1/memories", json={"content": "kept", "user_id": "bob"})
    assert made.status_code == 201
    target = path.replace(SOME_ID, made.json()["id"]) if "/v1/memories/" in path else path

    resp = await client.request(method, target, params={"bogus_guard": "alice"},
                                json={} if method in ("POST", "PATCH") else None)

    assert resp.status_code == 422, resp.text
    assert resp.json()["errors"][0]["field"] == "query.bogus_guard", resp.text
    kept = await client.get(f"/v1/memories/{made.json()['id']}")
    assert kept.status_code == 200
    assert kept.json()["content"] == "kept"
