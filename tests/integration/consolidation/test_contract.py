"""The consolidation endpoints in the served OpenAPI document: operation ids, named
schemas, problem+json errors (tests/contract/ had no OpenAPI test to extend)."""

from __future__ import annotations

from typing import Any

import httpx

OPERATIONS = {
    ("post", "/v1/consolidations"): ("runConsolidation", {"200", "202", "409", "422"}),
    ("get", "/v1/consolidations/{run_id}"): ("getConsolidation", {"200", "404"}),
    ("get", "/v1/consolidations"): ("listConsolidations", {"200", "422"}),
    ("post", "/v1/consolidations/{run_id}/revert"): ("revertConsolidation",
                                                      {"200", "404", "409"}),
}


async def test_consolidation_operations_have_ids_named_schemas_and_problem_errors(
    anon_client: httpx.AsyncClient,
) -> None:
    doc: dict[str, Any] = (await anon_client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]

    for (method, path), (operation_id, statuses) in OPERATIONS.items():
        operation = doc["paths"][path][method]
        assert operation["operationId"] == operation_id
        assert operation.get("summary")
        assert statuses <= set(operation["responses"])
        for status, response in operation["responses"].items():
            content = response.get("content", {})
            if status.startswith(("4", "5")):
                assert content["application/problem+json"]["schema"] == {
                    "$ref": "#/components/schemas/Problem"}
            else:
                ref = content["application/json"]["schema"]["$ref"]
                assert ref.rsplit("/", 1)[1] in schemas

    body = doc["paths"]["/v1/consolidations"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ConsolidationRequest")
    request = schemas["ConsolidationRequest"]
    assert {"user_id", "agent_id", "session_id", "namespace", "tags", "categories", "metadata",
            "older_than_seconds", "created_after", "created_before", "max_importance",
            "strategy", "selector", "op", "mode", "group_threshold", "include_summaries",
            "dry_run", "async"} == set(
        request["properties"])
    assert request["additionalProperties"] is False
    result = schemas["ConsolidationResult"]
    assert {"id", "status", "groups", "consolidated", "created", "deleted", "request",
            "started_at", "finished_at", "error", "progress", "remainder"} <= set(
        result["properties"])
    for name in ("ConsolidationGroup", "ConsolidationPage", "ConsolidationProgress",
                 "LLMSynthesisConfig", "HighestRelevanceConfig"):
        assert name in schemas
